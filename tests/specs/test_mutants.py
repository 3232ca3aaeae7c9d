"""Test the tester: every broken forget operator is rejected, with a short shrunk trace."""

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from unsee.model import Config
from unsee.specs.harness import verify
from unsee.specs.mutants import MUTANTS, PROTOCOL_MUTANTS, RARE_MUTANTS, REPORT_MUTANTS
from unsee.specs.statements import SpecViolation
from tests.model.test_reference_machine import ReferenceMachine


@pytest.mark.heavy
@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutant_is_caught_with_a_short_trace(mutant):
    def factory_for(cfg):
        return lambda: mutant(Config(sampling=cfg["sampling"], seed=cfg["seed"]), cfg["policy"])

    doc = verify(factory_for, examples=300, seed=0, directed=False)  # the random programs, shrunk
    assert len(doc["failures"]) == 1, f"{mutant.name} was not caught"
    f = doc["failures"][0]
    assert f["length"] <= 4, f"shrunk trace too long: {f['trace']}"
    if mutant.name == "source-redaction-B3":  # its graph keeps edges from the fields it dropped: caught as it is read
        assert "a graph with an edge to or from" in f["message"] and "a node it never added" in f["message"]
    else:
        assert "Theorem 1" in f["message"] or "Corollary 1" in f["message"]


@pytest.mark.heavy
@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_state_machine_rejects_mutant(mutant):
    class Broken(ReferenceMachine):
        runtime_class = mutant

    with pytest.raises((SpecViolation, ExceptionGroup)) as e:  # Hypothesis groups distinct failures
        run_state_machine_as_test(Broken, settings=settings(max_examples=300, stateful_step_count=12,
                                                            derandomize=True, deadline=None))
    found = e.value.exceptions if isinstance(e.value, ExceptionGroup) else (e.value,)
    assert all(isinstance(x, SpecViolation) for x in found), found


def test_reference_passes_the_same_harness():
    def factory_for(cfg):
        from unsee.specs.reference import ReferenceRuntime
        return lambda: ReferenceRuntime(Config(sampling=cfg["sampling"], seed=cfg["seed"]), cfg["policy"])

    doc = verify(factory_for, examples=100, seed=0)
    assert doc["failures"] == [] and doc["exact"] == doc["forgets"] == doc["optimal_invocations"] > 0


@pytest.mark.heavy
@pytest.mark.parametrize("mutant", PROTOCOL_MUTANTS, ids=lambda m: m.name)
def test_protocol_mutant_is_caught_by_the_default_run(mutant):
    """Mistakes in what a runtime exposes (graph, method, checkpoint payloads, log): the
    default run (100 sessions) catches each, and says what differs."""
    def factory_for(cfg):
        return lambda: mutant(Config(sampling=cfg["sampling"], seed=cfg["seed"]), cfg["policy"])

    doc = verify(factory_for, examples=100, seed=0, directed=False)  # the random programs alone
    assert doc["failures"], f"{mutant.name} was not caught"
    # the fallback checkpoint lies past τ (Theorem 1) or before τ−1 (Corollary 1): which example the
    # time-bounded shrinking ends on depends on the machine's load, and either names the mistake
    want = {"stale-graph-index": ("graph() differs from G^-z_T",), "ignores-method": ("receipt: method 'B7', but 'B5'",),
            "recent-checkpoints-only": ("Theorem 1", "Corollary 1: spliced at boundary"),
            "wrong-log-after-forgets": ("log",)}
    assert any(w in f["message"] for f in doc["failures"] for w in want[mutant.name]), doc["failures"]


@pytest.mark.parametrize("mutant", MUTANTS + PROTOCOL_MUTANTS + REPORT_MUTANTS + RARE_MUTANTS, ids=lambda m: m.name)
def test_the_directed_programs_alone_catch_every_mutant(mutant):
    """No random session at all: the 76 directed programs (every placement, the forget history, the
    part shapes) reject every mutant, each failure with its session's trace."""
    def factory_for(cfg):
        return lambda: mutant(Config(sampling=cfg["sampling"], seed=cfg["seed"]), cfg["policy"])

    doc = verify(factory_for, examples=0, seed=0)
    assert doc["failures"], f"{mutant.name} passed every directed program"
    assert all(f["directed"] and any("rt.forget(" in x for x in f["trace"]) for f in doc["failures"])
