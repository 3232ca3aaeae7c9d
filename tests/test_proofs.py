"""The Z3 obligations run as tests; the kernel is tested for soundness."""

import pytest
import z3

from unsee.proofs import kernel
from unsee.proofs.obligations import OBLIGATIONS, REFUTED, run_all


@pytest.mark.parametrize("obligation", OBLIGATIONS, ids=lambda o: o.__name__)
def test_obligation_is_proved(obligation):
    r = obligation(16)
    assert r.result == kernel.PROVED, f"{r.name}: {r.result} {r.detail} {r.model}"


@pytest.mark.parametrize("claim", REFUTED, ids=lambda o: o.__name__)
def test_false_statement_is_refuted_with_a_counter_model(claim):
    r = claim(16)
    assert r.result == kernel.COUNTEREXAMPLE
    assert r.model and "F" in r.model


def test_contradictory_assumptions_do_not_prove_anything():
    x = z3.Int("x")
    res, _, detail = kernel.check_valid([x > 1, x < 0], x == 42)
    assert res == kernel.UNKNOWN and "vacuous" in detail


def test_false_cannot_be_proved():
    res, model, _ = kernel.check_valid([z3.BoolVal(True)], z3.BoolVal(False))
    assert res == kernel.COUNTEREXAMPLE


def test_unknown_is_a_failure():
    r = kernel.Result("x", "s", kernel.UNKNOWN, 0.0)
    assert not r.ok


def test_run_all_reports_every_obligation():
    doc = run_all(max_steps=4)
    assert doc["all_proved"] is True
    assert [o["name"] for o in doc["obligations"]] == [o.__name__ for o in OBLIGATIONS]
    assert all(set(o) >= {"name", "statement", "result", "seconds"} for o in doc["obligations"])


def test_every_obligation_reports_the_bounds_it_used_and_honours_max_steps():
    from unsee.proofs.obligations import OBLIGATIONS, run_all

    doc = run_all(5)
    assert [o["name"] for o in doc["obligations"]] == [ob.__name__ for ob in OBLIGATIONS]
    for o in doc["obligations"]:
        assert o["bounds"], o["name"]
        bounded = "unbounded" not in o["bounds"] and "not used" not in o["bounds"]
        assert ("≤ 5" in o["bounds"]) == bounded, o  # no silent cap below --max-steps
        if bounded:
            assert "≤ 5" in o["statement"], o  # the statement quotes the bound it checked
