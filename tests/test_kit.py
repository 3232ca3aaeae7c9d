"""The conformance kit bites: the example runtime passes, every mutant fails with a trace."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from unsee.specs.runtimes import MUTANT_FACTORIES
from unsee.specs.vectors import generate, load_vectors

ROOT = Path(__file__).resolve().parent.parent


def kit(runtime: str, cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "unsee.specs.conformance",
                           f"--unsee-runtime={runtime}", "--unsee-max-examples=60", "-p", "no:cacheprovider",
                           "-q", *extra], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_example_runtime_passes_the_kit():
    p = kit("tiny_runtime:TinyRuntime", ROOT / "docs" / "examples")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 passed" in p.stdout


@pytest.mark.parametrize("mutant", MUTANT_FACTORIES)
def test_kit_rejects_mutant_with_a_readable_trace(tmp_path, mutant):
    p = kit(f"unsee.specs.runtimes:{mutant}", tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "shrunk trace" in p.stdout and "step(Observation(" in p.stdout


def test_xfails_file_marks_known_failures(tmp_path):
    xf = tmp_path / "xfails.txt"
    xf.write_text("test_every_statement_holds_on_random_sessions\ntest_shipped_vectors\n")
    p = kit("unsee.specs.runtimes:crop_at_tau", tmp_path, f"--unsee-xfails={xf}")
    assert p.returncode == 0 and "2 xfailed" in p.stdout, p.stdout


def test_missing_runtime_option_is_a_clear_failure(tmp_path):
    p = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "unsee.specs.conformance", "-q",
                        "-p", "no:cacheprovider"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and "--unsee-runtime" in p.stdout


def test_plugin_imports_nothing_heavy():
    code = "import sys, unsee.specs.plugin; print(json.dumps(sorted(m for m in ('torch', 'transformers', 'z3', 'hypothesis') if m in sys.modules)))"
    p = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True)
    assert json.loads(p.stdout) == []


def test_shipped_vectors_match_the_reference_model():
    assert generate() == load_vectors(), "regenerate with: python -m unsee.specs.vectors"
