#!/usr/bin/env bash
# Build unsee's wheel from the working tree and check that it installs and works on its own.
#
#   bash scripts/check_wheel.sh      (after bash scripts/setup.sh; takes about 20 s)
#
# An editable install (what setup.sh makes) finds every module in the checkout, so it cannot see
# a package or a data file the wheel leaves out. Here:
#   1. the working tree (tracked and untracked files, not ignored ones) is copied to a temporary
#      folder and `pip wheel --no-deps` builds the wheel there (no build/ or egg-info left behind
#      in the checkout, and no stale build/ folder leaks into the wheel);
#   2. the wheel must hold every file under model/, impl/, specs/ and proofs/ (as unsee/...) and
#      nothing else: no tests/, scripts/, docs/, no bare `model` or `impl`;
#   3. a fresh virtual environment gets the wheel (--no-deps) and the dependencies already
#      installed in .venv, linked entry by entry into its site-packages, leaving out .venv's own
#      unsee (its editable finder and its dist-info), so unsee, its console script and its
#      entry points come from the wheel alone;
#   4. from a folder outside the checkout: unsee resolves inside the new environment, `unsee
#      --help`, `unsee prove --help`, the LangGraph integration imports, the pytest plugin loads
#      through its pytest11 entry point, and `unsee demo --model tiny-llama` runs;
#   5. the tests' fast tier (`-m fast`) runs in the copy of the tree against the installed wheel:
#      the copy has no `unsee` folder (setup.py maps model/ to unsee.model only when building), so
#      every `unsee.*` a test imports is the wheel's; a check at the start asserts that.
#      --no-tests leaves this step out (CI does: it runs every tier against the wheel instead, with
#      UNSEE_WHEEL; see .ci/run).
# --keep DIR copies the wheel into DIR.
# Exits non-zero at the first failure.
set -euo pipefail
TESTS=1 KEEP=""
while [ $# -gt 0 ]; do
  case "$1" in
    --no-tests) TESTS=0 ;;
    --keep) KEEP=${2:?--keep needs a folder}; shift ;;
    *) echo "check_wheel.sh: unknown option $1 (options: --no-tests, --keep DIR)" >&2; exit 2 ;;
  esac
  shift
done
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV_PY=$ROOT/.venv/bin/python
START=$SECONDS
[ -x "$VENV_PY" ] || { echo "check_wheel.sh: no .venv; run bash scripts/setup.sh first" >&2; exit 2; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/unsee-wheel.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
SRC=$TMP/src DIST=$TMP/dist V=$TMP/venv OUTSIDE=$TMP/outside
mkdir -p "$SRC" "$DIST" "$OUTSIDE"

fail() { echo "check_wheel.sh: FAILED: $*" >&2; exit 1; }
ok() { echo "  ok  $*"; }

echo "[1/5] building the wheel from the working tree ..."
git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
  | tar --null -T - -cf - | tar -xf - -C "$SRC"
# --no-build-isolation: .venv already has setuptools (the build needs nothing else), so no download.
(cd "$SRC" && "$VENV_PY" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation \
   -w "$DIST" . ) || fail "pip wheel"
WHEEL=$(ls "$DIST"/unsee-*.whl)
ok "built $(basename "$WHEEL")"
if [ -n "$KEEP" ]; then
  mkdir -p "$KEEP" && cp "$WHEEL" "$KEEP/" && ok "copied to $KEEP/"
fi

echo "[2/5] what the wheel holds ..."
"$VENV_PY" - "$WHEEL" "$SRC" <<'EOF' || fail "the wheel's contents (above)"
import sys, tomllib, zipfile
from pathlib import Path

wheel, src = sys.argv[1], Path(sys.argv[2])
names = [n for n in zipfile.ZipFile(wheel).namelist() if not n.endswith("/")]
tops = {n.split("/")[0] for n in names}
problems = [f"top-level entry {t!r} (only unsee/ and its dist-info may be)" for t in sorted(tops)
            if t != "unsee" and not (t.startswith("unsee-") and t.endswith(".dist-info"))]
shipped = {n for n in names if n.startswith("unsee/")}
dirs = tomllib.loads((src / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
wanted = set()
for name, folder in dirs.items():
    for f in (src / folder).rglob("*"):
        if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
            wanted.add(name.replace(".", "/") + "/" + f.relative_to(src / folder).as_posix())
problems += [f"missing from the wheel: {n}" for n in sorted(wanted - shipped)]
problems += [f"in the wheel but not in the source folders: {n}" for n in sorted(shipped - wanted)]
inits = sorted(n for n in shipped if n.endswith("/__init__.py"))
if "unsee/__init__.py" in shipped:
    problems.append("unsee/__init__.py is shipped: unsee must stay a namespace package")
for p in problems:
    print("      " + p)
if problems:
    sys.exit(1)
print(f"  ok  {len(shipped)} files under unsee/ = every file under {', '.join(sorted(dirs.values()))}; "
      f"{len(inits)} packages; top level only unsee/ and its dist-info")
EOF

echo "[3/5] a fresh environment with the wheel and .venv's dependencies ..."
"$VENV_PY" -m venv --without-pip "$V"
SITE=$("$V/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
DEPS=$("$VENV_PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
n=0
for entry in "$DEPS"/* "$DEPS"/.[!.]*; do
  [ -e "$entry" ] || continue
  base=$(basename "$entry")
  case "$base" in
    unsee|unsee-*.dist-info|__editable__*unsee*|__pycache__) continue ;;  # .venv's own unsee stays out
  esac
  ln -s "$entry" "$SITE/$base"
  n=$((n + 1))
done
"$V/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-index "$WHEEL" 2>&1 \
  | { grep -v "^WARNING: Location" || true; }
[ -x "$V/bin/unsee" ] || fail "the wheel installed no unsee console script"
ok "$n entries of .venv's site-packages linked (its unsee left out); the wheel installed with --no-deps"

echo "[4/5] the installed wheel, run from $OUTSIDE (outside the checkout) ..."
cd "$OUTSIDE"
unset PYTHONPATH
export PATH="$V/bin:$PATH"
run() {  # run "what" command...: the command must succeed
  local what=$1; shift
  "$@" >"$TMP/out" 2>&1 || { tail -30 "$TMP/out" >&2; fail "$what: $*"; }
  ok "$what"
}
"$V/bin/python" - "$SITE" "$ROOT" <<'EOF' || fail "unsee does not come from the wheel alone"
import importlib.metadata as md, sys
site, root = sys.argv[1], sys.argv[2]
import unsee, unsee.model, unsee.impl.cli
where = [unsee.model.__file__, unsee.impl.cli.__file__, *unsee.__path__]
bad = [w for w in where if not w.startswith(site + "/")]
dists = [d for d in md.distributions() if d.metadata["Name"] == "unsee"]
eps = [e for e in md.entry_points(group="pytest11") if e.name == "unsee"]
assert not bad, f"outside the new site-packages: {bad}"
assert not any(p.startswith(root) for p in sys.path), f"the checkout is on sys.path: {sys.path}"
assert len(dists) == 1 and str(dists[0].locate_file("")).startswith(site), [d._path for d in dists]
assert len(eps) == 1 and eps[0].value == "unsee.specs.plugin", eps
for bare in ("model", "impl", "specs", "proofs", "tests"):
    try:
        __import__(bare)
    except ImportError:
        continue
    raise AssertionError(f"a bare `{bare}` is importable")
print(f"  ok  unsee.model is {unsee.model.__file__}; one unsee distribution (the wheel's), its pytest11 entry point; "
      "no bare model/impl/specs/proofs/tests")
EOF
run "unsee --help" unsee --help
run "unsee prove --help" unsee prove --help
run "import unsee.impl.integrations.langgraph" python -c "import unsee.impl.integrations.langgraph"
run "import unsee.specs.conformance, vectors read from the package" \
  python -c "import unsee.specs.conformance; from unsee.specs.vectors import load_vectors; assert load_vectors()"
python -m pytest --help >"$TMP/out" 2>&1 || { tail -30 "$TMP/out" >&2; fail "python -m pytest --help"; }
grep -q -- "--unsee-runtime" "$TMP/out" || fail "pytest --help has no --unsee-runtime: the pytest11 plugin did not load"
ok "pytest loads the plugin (pytest --help lists --unsee-runtime)"
run "unsee demo --model tiny-llama" unsee demo --model tiny-llama
grep -q "bit-exact" "$TMP/out" || { tail -30 "$TMP/out" >&2; fail "unsee demo did not report bit-exactness"; }
if [ "$TESTS" = 1 ]; then
  echo "[5/5] the tests' fast tier against the installed wheel ..."
  cd "$SRC"
  "$V/bin/python" -c "import unsee.model, sys; assert unsee.model.__file__.startswith(sys.argv[1] + '/'), unsee.model.__file__" \
    "$SITE" || fail "the copy's tests would not import the wheel's unsee"
  T0=$SECONDS
  HYPOTHESIS_PROFILE=dev "$V/bin/python" -m pytest -m fast -q --durations=8 -p no:cacheprovider -o addopts="" >"$TMP/out" 2>&1 \
    || { tail -40 "$TMP/out" >&2; fail "the fast tier against the wheel"; }
  ok "fast tier against the wheel: $(tail -1 "$TMP/out") ($((SECONDS - T0)) s)"
fi
echo "check_wheel.sh: the wheel installs and works ($((SECONDS - START)) s)"
