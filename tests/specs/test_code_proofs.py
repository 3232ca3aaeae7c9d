"""CrossHair on the functions of unsee.model (`unsee prove --code`): the bounded pass finds no
counterexample to any contract and refutes every broken copy; the runner's verdicts can fail."""

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from unsee.impl.cli import app
from unsee.proofs import code

FUNCTIONS = {"unsee.model.plan.first_entry", "unsee.model.replay.sanitize", "unsee.model.plan.taint_closure",
             "unsee.model.state.Observation.without", "unsee.model.plan.replay_tools",
             "unsee.model.plan.suffix_closure", "unsee.model.plan.choose_checkpoint",
             "unsee.model.replay.restore"}
runner = CliRunner()


@pytest.fixture(scope="module")
def bounded_pass(tmp_path_factory):
    """One run of the command, as CI runs it: every contract at its own path cap."""
    path = tmp_path_factory.mktemp("code") / "code.json"
    res = runner.invoke(app, ["prove", "--code", "--json", str(path)])
    return res, json.loads(path.read_text())


def test_every_function_is_listed_and_none_has_a_counterexample(bounded_pass):
    res, doc = bounded_pass
    assert res.exit_code == 0, res.output
    assert doc["all_ok"] is True
    assert FUNCTIONS <= {f["name"] for f in doc["functions"]}
    for f in doc["functions"]:
        assert f["result"] in (code.EXHAUSTED, code.NO_COUNTEREXAMPLE), f
        assert f["contract"] and f["bounds"] and f["paths"] >= 1
        if f["result"] == code.EXHAUSTED:
            assert f["stopped"] == "exhausted" and f["paths"] <= f["path_cap"]
        else:
            assert f["stopped"] in ("path cap", "time budget")
    for name in ("first_entry", "sanitize", "taint_closure", "suffix_closure", "choose_checkpoint", "restore", "without",
                 "replay_tools"):
        assert name in res.output


def test_every_broken_copy_is_refuted_with_its_counterexample(bounded_pass):
    _, doc = bounded_pass
    for f in doc["functions"]:
        b = f["broken"]
        assert b["result"] == code.COUNTEREXAMPLE, f
        assert b["mutation"] and b["counterexample"].startswith("false when calling ") and "_broken(" in b["counterexample"]


def test_the_contracts_hold_on_the_real_function_at_each_broken_copys_counterexample():
    """Each broken copy's counterexample input, given to the real function: the contract holds there."""
    assert code.tau_post((2, 1, 1), code.located_tau((2, 1, 1)))
    assert code.sanitize_post((0,), (1,), 0, False, code.sanitized((0,), (1,), 0, False))
    edges, seeds = ((), (True,), (False, True)), (True, False, False)
    assert code.closure_post(edges, seeds, code.tainted(edges, seeds))
    assert code.checkpoint_post((1, 0), 1, code.chosen_boundary((1, 0), 1))
    assert code.restore_post(code.restored_states((3, 1)))
    # and the broken copies fail them
    assert not code.tau_post((2, 1, 1), code.located_tau_broken((2, 1, 1)))
    assert not code.closure_post(edges, seeds, code.tainted_broken(edges, seeds))
    assert not code.restore_post(code.restored_states_broken((3, 1)))


def test_a_counterexample_fails_the_command(tmp_path, monkeypatch):
    """A function that breaks its contract (here the broken copy put in the real one's place) is a
    counterexample, and the command exits non-zero."""
    i = next(k for k, p in enumerate(code.PROOFS) if p.name.endswith("choose_checkpoint"))
    swapped = replace(code.PROOFS[i], check=code.chosen_boundary_broken)
    monkeypatch.setattr(code, "PROOFS", (swapped,))
    path = tmp_path / "code.json"
    res = runner.invoke(app, ["prove", "--code", "--jobs", "1", "--json", str(path)])
    assert res.exit_code == 1
    (f,) = json.loads(path.read_text())["functions"]
    assert f["result"] == code.COUNTEREXAMPLE and "chosen_boundary_broken" in f["counterexample"]


def test_a_broken_copy_that_is_not_refuted_fails_the_command(tmp_path, monkeypatch):
    """A contract too weak to tell a broken copy from the function is reported, and fails."""
    i = next(k for k, p in enumerate(code.PROOFS) if p.name.endswith("choose_checkpoint"))
    monkeypatch.setattr(code, "PROOFS", (replace(code.PROOFS[i], broken=code.chosen_boundary),))
    path = tmp_path / "code.json"
    res = runner.invoke(app, ["prove", "--code", "--jobs", "1", "--paths", "20", "--json", str(path)])
    assert res.exit_code == 1
    assert "not refuted" in res.output
    (f,) = json.loads(path.read_text())["functions"]
    assert f["result"] == f["broken"]["result"] == code.NO_COUNTEREXAMPLE and f["broken"]["paths"] == 20


def test_a_spent_budget_is_no_counterexample_not_a_proof():
    out = code.analyze(code.chosen_boundary, 5, 60.0)
    assert out.result == code.NO_COUNTEREXAMPLE and out.stopped == "path cap" and out.paths == 5


def never_called(x: int) -> int:
    """
    pre: x > 0 and x < 0
    post: __return__ == x + 1
    """
    return x


def test_a_precondition_no_input_meets_is_vacuous():
    out = code.analyze(never_called, 50, 20.0)
    assert out.result == code.VACUOUS


def _raises(s, c):
    from unsee.model.errors import UnseeError

    raise UnseeError(f"checkpoint at boundary {c.boundary} restored a cache of the wrong length")


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_function_that_raises_is_a_counterexample_not_a_traceback(tmp_path, monkeypatch, jobs):
    """restore raising on every checkpoint (as a restore that keeps one block too many does, through
    its own length check): reported as a counterexample with the exception, in JSON, exit 1."""
    i = next(k for k, p in enumerate(code.PROOFS) if p.name.endswith("restore"))
    monkeypatch.setattr(code, "restore", _raises)
    monkeypatch.setattr(code, "PROOFS", (code.PROOFS[i],))
    path = tmp_path / "code.json"
    res = runner.invoke(app, ["prove", "--code", "--jobs", jobs, "--paths", "5", "--json", str(path)])
    assert res.exit_code == 1 and res.exception is None or isinstance(res.exception, SystemExit), res.output
    (f,) = json.loads(path.read_text())["functions"]
    assert f["result"] == code.COUNTEREXAMPLE and "raised UnseeError" in f["counterexample"], f
    assert "Traceback" not in res.output
