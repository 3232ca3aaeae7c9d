"""The Z3 obligations run as tests; the kernel is tested for soundness."""

import pytest
import z3

from unsee.proofs import kernel
from unsee.proofs.obligations import ENCODING_CHECKS, OBLIGATIONS, REFUTED, run_all

# `unsee prove` defaults to 16; the bounded obligations grow with the square (two targets,
# every pair of entries), so the suite proves them at 12.
BOUND = 12


@pytest.mark.parametrize("obligation", OBLIGATIONS + ENCODING_CHECKS, ids=lambda o: o.__name__)
def test_obligation_is_proved(obligation):
    r = obligation(BOUND)
    assert r.result == kernel.PROVED, f"{r.name}: {r.result} {r.detail} {r.model}"


@pytest.mark.parametrize("claim", REFUTED, ids=lambda o: o.__name__)
def test_false_statement_is_refuted_with_a_counter_model(claim):
    r = claim(BOUND)
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
    # the checks that hold by construction are listed apart and never counted as proofs
    assert [o["name"] for o in doc["encoding_checks"]] == [o.__name__ for o in ENCODING_CHECKS]
    assert not {o["name"] for o in doc["obligations"]} & {o["name"] for o in doc["encoding_checks"]}
    assert all(set(o) >= {"name", "statement", "result", "seconds"} for o in doc["obligations"])


def test_every_obligation_reports_the_bounds_it_used_and_honours_max_steps():
    from unsee.proofs.obligations import OBLIGATIONS, run_all

    doc = run_all(5)
    assert [o["name"] for o in doc["obligations"]] == [ob.__name__ for ob in OBLIGATIONS]
    for o in doc["obligations"] + doc["encoding_checks"]:
        assert o["bounds"], o["name"]
        bounded = "≤" in o["bounds"]  # a bounded part: it must be exactly --max-steps
        assert bounded or o["bounds"].startswith("unbounded"), o
        if bounded:
            assert "≤ 5" in o["bounds"] and "≤ 5" in o["statement"], o  # no silent cap, and quoted
            assert not any(f"≤ {k}" in o["bounds"] for k in range(1, 5)), o


def test_the_real_obligations_derive_the_shared_prefix_instead_of_building_it():
    """The twin reads sanitize(o_t) at every t: a Lemma 1 that held by construction would be
    proved without the definition of o ∖ Z, and this one is not."""
    from unsee.proofs.obligations import streams, theorem1_needs_the_prefix

    o, oz, real, twin, facts = streams(4, (3,))
    assert not z3.eq(real[2], twin[2])  # different terms: equality must be derived
    res, _, _ = kernel.check_valid([f for f in facts if not z3.is_implies(f)], real[2] == twin[2])
    assert res == kernel.COUNTEREXAMPLE
    res, _, _ = kernel.check_valid(facts, real[2] == twin[2])
    assert res == kernel.PROVED
    assert theorem1_needs_the_prefix(4).result == kernel.COUNTEREXAMPLE


def test_re_entry_and_two_targets_are_in_the_bounded_statements():
    from unsee.proofs.obligations import target_entries

    entries = target_entries(5)
    assert (5, (2, 4)) in entries and (5, (3, 3)) in entries and (5, (1,)) in entries
    o, oz, real, twin, facts = __import__("unsee.proofs.obligations", fromlist=["streams"]).streams(5, (2,))
    s = z3.Solver()  # the target may be in o_4 as well (nothing forbids re-entry)
    has = [f for f in facts if not z3.is_implies(f) and not z3.is_not(f)][0].decl()
    s.add(*facts, has(o[4]))
    assert s.check() == z3.sat
