"""The Z3 obligations run as tests; the kernel is tested for soundness."""

import pytest
import z3

from unsee.proofs import code, kernel
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


def test_every_query_is_solved_in_a_fresh_context_from_its_text(monkeypatch):
    # Z3's search order follows term ids in its context, so a query solved in the shared context
    # after a whole test run (CI) came back unknown where a fresh process proved it
    contexts = []
    check = z3.Solver.check

    def recorded(self, *a):
        contexts.append(self.ctx)
        return check(self, *a)

    monkeypatch.setattr(z3.Solver, "check", recorded)
    x = z3.Int("x")
    with kernel.recording() as queries:
        assert kernel.check_valid([x > 1], x > 0)[0] == kernel.PROVED
        res, model, _ = kernel.check_valid([x > 1], x > 2)
        assert kernel.check_exists([x > 5])[0] == kernel.PROVED
    assert res == kernel.COUNTEREXAMPLE and model == "[x = 2]"
    assert len(contexts) == len(queries) == 5
    assert all(c is not z3.main_ctx() for c in contexts) and len({id(c) for c in contexts}) == 5
    assert [q.z3 for q in queries] == ["sat", "unsat", "sat", "sat", "sat"]


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
        bounded = "≤" in o["bounds"]  # a bounded part: it must be exactly --max-steps, or say it is not
        assert bounded != o["bounds"].startswith("unbounded"), o  # "unbounded" only on a row with no bound
        if bounded and "independent of --max-steps" not in o["bounds"]:
            assert "≤ 5" in o["bounds"] and "≤ 5" in o["statement"], o  # no silent cap, and quoted
            assert not any(f"≤ {k}" in o["bounds"] for k in range(1, 5)), o


def test_every_row_says_what_it_establishes():
    """Validity, existence, samples and encoding checks each have their own label; only validity
    rows may be unbounded, and the connected induction is the one unbounded Theorem 1 row."""
    doc = run_all(3)
    rows = doc["obligations"] + doc["encoding_checks"]
    assert all(o["kind"] in kernel.KINDS for o in rows)
    kinds = {o["name"]: o["kind"] for o in rows}
    assert kinds["theorem1_lemma1_induction"] == kernel.VALIDITY
    assert kinds["lemma2_taint_queries"] == kernel.SAMPLES
    assert {n for n, k in kinds.items() if k == kernel.EXISTENCE} == {
        "corollary1_cheaper_shapes_not_exact", "a1_needed", "a2_needed"}
    assert {o["kind"] for o in doc["encoding_checks"]} == {kernel.ENCODING}
    unbounded = {o["name"] for o in rows if o["bounds"].startswith("unbounded")}
    assert unbounded == {"theorem1_lemma1_induction", "lemma2_closure_step", "corollary1_cost"}
    assert all(kinds[n] == kernel.VALIDITY for n in unbounded)
    theorem1 = [o["name"] for o in rows if o["name"].startswith("theorem1") and o["name"] in unbounded]
    assert theorem1 == ["theorem1_lemma1_induction"]


def test_the_induction_is_one_connected_proof_that_uses_the_first_entry_and_the_replay_from_tau():
    """Each of the induction's five queries is unsat from the same axioms (the definitions and
    both schema instances); the cores of Theorem 1's base and step use τ: the first entry, the
    restore at τ−1 and the replay from τ (not congruence alone)."""
    from unsee.proofs.obligations import induction_terms, theorem1_lemma1_induction

    r = theorem1_lemma1_induction(1)
    assert r.result == kernel.PROVED and r.detail == "5 checks"
    P1, P2, tau, t, defs, witness = induction_terms()
    names = ["tau≥1", "R_0", "Rz_0", "real", "twin", "without", "enters", "absent before τ", "restore", "replay",
             "A2"]
    assert len(names) == len(defs)
    goal1 = z3.ForAll([t], z3.Implies(z3.And(0 <= t, t <= tau - 1), P1(t)))
    step1 = z3.ForAll([t], z3.Implies(z3.And(1 <= t, t <= tau - 1, P1(t - 1)), P1(t)))
    for goal, needed in ((P2(tau - 1), {"restore", "absent before τ"}), 
                         (z3.ForAll([t], z3.Implies(z3.And(t >= tau, P2(t - 1)), P2(t))), {"replay", "A2"})):
        s = z3.Solver()
        s.set("rlimit", kernel.RLIMIT)
        for n, d in zip(names, defs):
            s.assert_and_track(d, n)
        s.assert_and_track(z3.Implies(z3.And(P1(0), step1), goal1), "schema")
        s.add(z3.Not(goal))
        assert s.check() == z3.unsat
        assert needed <= {str(c) for c in s.unsat_core()}, s.unsat_core()


def test_without_the_schema_instances_the_goal_is_not_proved(monkeypatch):
    """Z3 has no induction: the ∀t goal from the definitions alone is not proved (here unknown
    within a resource limit of 4·10^6, about two seconds), so the schema instances are what make
    the induction go through."""
    from unsee.proofs.obligations import induction_terms

    monkeypatch.setattr(kernel, "RLIMIT", 4_000_000)
    P1, P2, tau, t, defs, witness = induction_terms()
    goal = z3.ForAll([t], z3.Implies(t >= tau - 1, P2(t)))
    res, _, _ = kernel.check_valid(defs, goal, witness)
    assert res != kernel.PROVED


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


# --- certificates: every query as SMT-LIB, re-checked by cvc5 ---------------------------

def emitted(tmp_path, max_steps=3):
    from unsee.proofs import certificates

    doc = run_all(max_steps, record=True)
    return doc, certificates.emit(doc, tmp_path)


def test_every_certificate_is_re_checked_by_cvc5_and_agrees(tmp_path):
    import subprocess
    import sys

    from unsee.proofs import certificates

    doc, index = emitted(tmp_path)
    report = certificates.recheck(tmp_path, index)
    assert report["all_agree"], [r["disagreements"][:2] for r in report["rows"] if r["disagreements"]]
    names = {o.__name__ for o in OBLIGATIONS + ENCODING_CHECKS + REFUTED}
    assert {r["row"] for r in report["rows"]} == names  # every row has its queries, each re-checked
    assert all(r["agree"] == r["queries"] >= 1 for r in report["rows"])
    assert report["queries"] == len(index) == len(list(tmp_path.glob("*/*.smt2")))
    first = (tmp_path / index[0]["file"]).read_text()
    assert first.startswith("(set-logic ALL)") and "(set-info :status sat)" in first and "(check-sat)" in first
    # the folder re-checks itself, with nothing from unsee
    res = subprocess.run([sys.executable, str(tmp_path / "recheck.py")], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "all agree" in res.stdout, res.stdout + res.stderr


def test_a_false_statement_is_refuted_by_both_solvers(tmp_path):
    from unsee.proofs import certificates

    doc, index = emitted(tmp_path, 2)
    assert {r["name"] for r in doc["refuted"]} == {c.__name__ for c in REFUTED}
    assert all(r["result"] == kernel.COUNTEREXAMPLE for r in doc["refuted"])
    negated = [e for e in index if e["group"] == "refuted" and e["query"] == "negated goal"]
    assert len(negated) == len(REFUTED)
    for e in negated:
        assert e["z3"] == "sat"
        answer, _ = certificates.cvc5_check((tmp_path / e["file"]).read_text(), "sat")
        assert answer == "sat", e  # cvc5 finds the counterexample too


def test_a_wrong_expected_answer_or_a_false_certificate_is_a_disagreement(tmp_path):
    """The re-check can fail: a flipped expected answer, and a file that states something false."""
    import json

    from unsee.proofs import certificates

    doc, index = emitted(tmp_path, 1)
    i = next(k for k, e in enumerate(index) if e["query"] == "negated goal" and e["group"] == "obligations")
    flipped = [dict(e) for e in index]
    flipped[i]["expected"] = "sat"
    report = certificates.recheck(tmp_path, flipped)
    assert not report["all_agree"]
    found = [d for r in report["rows"] for d in r["disagreements"]]
    assert [d["file"] for d in found] == [index[i]["file"]], found  # the flipped file, and only it
    assert found[0]["cvc5"] == "unsat" and found[0]["expected"] == "sat"
    (tmp_path / index[i]["file"]).write_text("(set-logic ALL)\n(declare-const x Int)\n(assert (> x 0))\n(check-sat)\n")
    (tmp_path / "index.json").write_text(json.dumps(index))
    report = certificates.recheck(tmp_path)
    assert not report["all_agree"]
    found = [d for r in report["rows"] for d in r["disagreements"]]
    assert [d["file"] for d in found] == [index[i]["file"]], found
    assert found[0]["cvc5"] == "sat" and found[0]["expected"] == "unsat"


def test_prove_emit_writes_the_certificates_and_reports_agreement(tmp_path):
    import json

    from typer.testing import CliRunner

    from unsee.impl.cli import app

    path = tmp_path / "prove.json"
    res = CliRunner().invoke(app, ["prove", "--max-steps", "2", "--emit", str(tmp_path / "smt"), "--json", str(path)])
    assert res.exit_code == 0, res.output
    doc = json.loads(path.read_text())
    assert doc["all_proved"] and doc["certificates"]["all_agree"] and "queries" not in doc
    assert doc["certificates"]["queries"] == len(json.loads((tmp_path / "smt" / "index.json").read_text()))
    assert "cvc5 agrees" in res.output and "kind" in res.output and "code ties" in res.output


# --- bugs planted in model/ break `unsee prove` through the code ties ----------------------

def _skips_multi_parent(artifacts, source_artifacts):
    out = set(source_artifacts)
    for a in artifacts:
        if a.id not in out and len(a.parents) == 1 and a.parents[0] in out:
            out.add(a.id)
    return out


def _latest(checkpoints, tau):
    return max(checkpoints, key=lambda c: c.boundary)


def _one_block_too_many(s, c):
    from dataclasses import replace as _replace

    live, stored = s.state, s.states[c.boundary]
    more = [b.end for b in live.blocks if b.end > c.token_offset]
    end = more[0] if more else c.token_offset
    return _replace(stored, tokens=live.tokens[:end], kv=s.lm.crop(live.kv, end), env=dict(s.snapshots)[c.env_snapshot])


def _compensation_misses_tau(world, effects, boundary):
    from unsee.model.plan import arguments, replay_tools

    dedup, comp = replay_tools(world, effects)
    made = {e.call_id for e in effects}
    return dedup, comp + [{"call_id": e.call_id, "tool": e.tool, "args": None, "committed": arguments(e.args),
                           "reason": "counterfactual makes no such call"}
                          for e in world if e.turn > boundary + 1 and e.call_id not in made]


def _without_keeps_hidden(self, sources):
    return code.broken_sanitize(self, sources)


PLANTED = {  # (module attribute path, replacement, the tie that must catch it)
    "first_entry returns the last entry": ("plan.first_entry", code.broken_first_entry, "first_entry"),
    "taint_closure follows one hop": ("plan.taint_closure", code.broken_taint_closure, "closure"),
    "suffix_closure skips artifacts with several parents": ("plan.suffix_closure", _skips_multi_parent, "closure"),
    "choose_checkpoint accepts boundary ≤ τ": ("plan.choose_checkpoint", code.broken_choose_checkpoint,
                                               "choose_checkpoint"),
    "the latest checkpoint regardless of τ": ("plan.choose_checkpoint", _latest, "choose_checkpoint"),
    "restore keeps one block too many": ("replay.restore", _one_block_too_many, "restore"),
    "sanitize keeps a z-sourced instead_of part": ("replay.sanitize", code.broken_sanitize, "sanitize"),
    "Observation.without keeps a z-sourced instead_of part": ("state.Observation.without", _without_keeps_hidden,
                                                              "sanitize"),
    "replay_tools de-duplicates by call id only": ("plan.replay_tools", code.broken_replay_tools, "replay_tools"),
    "compensation misses a call committed at τ = c+1": ("plan.compensation", _compensation_misses_tau, "compensation"),
}


def plant(monkeypatch, where, replacement):
    from unsee.model import plan, replay, state

    owner_path, attr = where.rsplit(".", 1)
    owner = {"plan": plan, "replay": replay, "state": state}[owner_path.split(".")[0]]
    for part in owner_path.split(".")[1:]:
        owner = getattr(owner, part)
    monkeypatch.setattr(owner, attr, replacement)


@pytest.mark.parametrize("bug", PLANTED, ids=list(PLANTED))
def test_a_bug_planted_in_the_code_makes_prove_report_a_counterexample(bug, monkeypatch):
    from unsee.proofs.obligations import TIES_OF

    where, replacement, tie = PLANTED[bug]
    plant(monkeypatch, where, replacement)
    doc = run_all(2)
    assert doc["all_proved"] is False
    ties = {t["name"]: t for t in doc["ties"]}
    assert ties[tie]["result"] == "counterexample" and ties[tie]["counterexample"], ties[tie]
    for o in doc["obligations"]:
        if tie in TIES_OF[o["name"]]:
            assert o["result"] == kernel.COUNTEREXAMPLE and o["model"], o  # the row names the input that broke it


def test_the_command_fails_on_a_planted_bug(monkeypatch, tmp_path):
    import json

    from typer.testing import CliRunner

    from unsee.impl.cli import app

    plant(monkeypatch, *PLANTED["Observation.without keeps a z-sourced instead_of part"][:2])
    path = tmp_path / "prove.json"
    res = CliRunner().invoke(app, ["prove", "--max-steps", "2", "--json", str(path)])
    assert res.exit_code == 1
    assert "tie sanitize: counterexample" in res.output
    doc = json.loads(path.read_text())
    assert {o["name"] for o in doc["obligations"] if o["result"] == "counterexample"} >= {
        "theorem1_lemma1_induction", "theorem1_bounded", "a2_needed"}


def test_lemma2_boundary_needs_the_chain_edge_it_states():
    """The boundary holds only on the conservative graph: with the chain edge previous output →
    next left free like any other forward edge, a counterexample appears at two turns."""
    from unsee.proofs.obligations import lemma2_boundary_bounded

    assert lemma2_boundary_bounded(3).result == kernel.PROVED
    r = lemma2_boundary_bounded(3, chain=False)
    assert r.result == kernel.COUNTEREXAMPLE and r.detail.startswith("n=2")
