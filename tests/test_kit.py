"""The conformance kit bites: the example runtime passes, every mutant fails with a trace."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from unsee.specs.runtimes import MUTANT_FACTORIES
from unsee.specs.vectors import generate, load_vectors

ROOT = Path(__file__).resolve().parent.parent


def kit(runtime: str, cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    """The kit's default run (100 sessions, one in five up to 40 observations) on `runtime`."""
    return subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "unsee.specs.conformance",
                           f"--unsee-runtime={runtime}", "-p", "no:cacheprovider",
                           "-q", *extra], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(cwd)})


@pytest.mark.heavy
def test_example_runtime_passes_the_kit():
    p = kit("tiny_runtime:TinyRuntime", ROOT / "docs" / "examples")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 passed" in p.stdout
    assert "unsee kit: 100 sessions" in p.stdout and "several targets with different tau" in p.stdout


def test_reference_passes_the_default_run_with_a_coverage_line(tmp_path):
    p = kit("unsee.specs.runtimes:reference", tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    line = next(x for x in p.stdout.splitlines() if x.startswith("unsee kit:"))
    for scenario in ("method B5", "checkpoint forced", "session longer than 12 observations", "instead_of parts",
                     "several targets with different tau", "forget after an earlier forget"):
        assert scenario in line, line
    targets = next(x for x in p.stdout.splitlines() if x.startswith("unsee kit: coverage targets"))
    for target in ("compaction right before tau", "policy has no checkpoint at tau-1", "target inside an instead_of part",
                   "z1, then z2, then z1 again"):
        assert target in targets and f"{target}: 0 (" not in targets, targets


def test_a_runtime_that_raises_is_named_with_a_runnable_trace(tmp_path):
    (tmp_path / "raising.py").write_text(
        "from unsee.model import Config, ReferenceRuntime\n"
        "class Raising(ReferenceRuntime):\n"
        "    def forget(self, sources, method='B7', checkpoint=None):\n"
        "        if method == 'B5':\n"
        "            raise NotImplementedError('B5 is not supported')\n"
        "        return super().forget(sources, method, checkpoint)\n"
        "def make(cfg):\n"
        "    return Raising(Config(sampling=cfg['sampling'], seed=cfg['seed']), cfg['policy'])\n")
    p = kit("raising:make", tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "the runtime raised NotImplementedError: B5 is not supported" in p.stdout
    assert "ExceptionGroup" not in p.stdout
    assert "from unsee.model import Observation, Part" in p.stdout and "method='B5'" in p.stdout


@pytest.mark.heavy
@pytest.mark.parametrize("mutant", MUTANT_FACTORIES)
def test_kit_rejects_mutant_with_a_readable_trace(tmp_path, mutant):
    p = kit(f"unsee.specs.runtimes:{mutant}", tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "shrunk trace" in p.stdout and "rt.step(Observation(" in p.stdout and "rt.forget(" in p.stdout


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


@pytest.mark.heavy
def test_the_guides_example_command_works_verbatim():
    """The guide's command for the example runtime, run as written from docs/examples."""
    import re

    guide = (ROOT / "docs" / "verify-your-runtime.md").read_text()
    cmd = next(c for c in re.findall(r"```bash\n(.*?)```", guide, re.S) if "tiny_runtime:TinyRuntime" in c).strip()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    p = subprocess.run(["bash", "-c", cmd], cwd=ROOT / "docs" / "examples", capture_output=True, text=True,
                       timeout=600, env=env)
    assert p.returncode == 0 and "2 passed" in p.stdout, p.stdout + p.stderr


def test_the_guides_state_machine_runs_on_the_example_and_rejects_a_mutant(monkeypatch):
    """The guide's RuntimeMachine snippet, verbatim, on the from-scratch example; the same
    machine on a broken forget operator raises the statement it breaks."""
    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test

    from unsee.specs import runtimes
    from unsee.specs.machine import RuntimeMachine
    from unsee.specs.statements import SpecViolation

    monkeypatch.syspath_prepend(str(ROOT / "docs" / "examples"))
    guide = (ROOT / "docs" / "verify-your-runtime.md").read_text()
    code = next(c for c in re.findall(r"```python\n(.*?)```", guide, re.S) if "RuntimeMachine" in c)
    ns: dict = {}
    exec(code, ns)
    quick = settings(max_examples=15, stateful_step_count=10, derandomize=True, deadline=None)
    run_state_machine_as_test(ns["TinyRuntimeMachine"], settings=quick)

    class Broken(RuntimeMachine):
        def make_runtime(self, policy, sampling, seed):
            return runtimes.crop_at_tau({"policy": policy, "sampling": sampling, "seed": seed})

    with pytest.raises(SpecViolation):
        run_state_machine_as_test(Broken, settings=settings(quick, max_examples=200))
