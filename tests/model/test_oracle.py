"""The oracle against the model it judges: they agree on every generated case, and every check
that takes its expectation from the oracle can fail (a mutant per check)."""

import pytest
from hypothesis import given, settings

from unsee.model import Config, Observation, Part
from unsee.specs.reference import ReferenceRuntime
from unsee.model.replay import append, counterfactual_stream, new_session, run, sanitize, selective_replay
from unsee.model.plan import (choose_checkpoint, first_entry, plan_forget, provenance_graph, replay_tools, suffix_closure,
                              taint_closure)
from unsee.specs import oracle
from unsee.specs import statements as S
from unsee.specs.harness import present_targets, verify
from unsee.specs.mutants import REPORT_MUTANTS
from unsee.specs.strategies import configs, programs


def compare_at_forget(s, chosen) -> None:
    """Every function of Algorithm 1 on session `s` and target set `chosen`, against the oracle."""
    log = s.observations
    assert counterfactual_stream(log, chosen) == oracle.counterfactual(log, chosen)
    for o in log:
        assert sanitize(o, chosen) == oracle.without(o, chosen)
        assert o.without(frozenset(chosen)) == oracle.without(o, chosen)
    plan = plan_forget(s, chosen)
    arts, tau = plan.carriers, plan.tau
    assert tau == first_entry(s, arts, chosen)[0] == oracle.first_entry(log, chosen)
    g = provenance_graph(s.state)
    want = oracle.taint_closure(g, chosen)
    assert taint_closure(g, arts) == want
    assert suffix_closure(s.state.artifacts, arts) == want
    boundaries = [c.boundary for c in s.checkpoints]
    assert choose_checkpoint(s.checkpoints, tau).boundary == oracle.splice_point(boundaries, tau)
    assert set(boundaries) == oracle.promised_checkpoints(s.policy, log)
    twin = run(oracle.counterfactual(log, chosen), s.config, s.policy)
    new, receipt = selective_replay(s, chosen)
    c = receipt.checkpoint
    assert receipt.transitions == oracle.transitions(s.T, c) == s.T - oracle.splice_point(boundaries, tau)
    assert sorted(receipt.compensation, key=lambda x: x["call_id"]) == oracle.compensation(s.world, twin.world, c)
    assert sorted(receipt.deduplicated) == oracle.deduplicated(s.world, twin.world, c)
    effects = twin.world[len([e for e in twin.world if e.turn <= c]):]
    dedup, differs = replay_tools(s.world, effects)
    assert sorted(dedup) == oracle.deduplicated(s.world, effects, c)
    assert {x["call_id"] for x in differs} <= {x["call_id"] for x in oracle.compensation(s.world, effects, c)}
    assert new.observations == oracle.counterfactual(log, chosen)


@settings(max_examples=80)
@given(program=programs(8, 16), cfg=configs)
def test_model_agrees_with_the_oracle_on_every_generated_case(program, cfg):
    """The generated programs the kit runs (forgets after forgets included), checked function
    by function: o^{-z}, sanitize, Observation.without, τ, I(z) both ways, the checkpoint
    rule, the policy's checkpoints, T−c, the compensation and de-duplication lists, the log."""
    s = new_session(Config(sampling=cfg["sampling"], seed=cfg["seed"]), cfg["policy"])
    forgets = 0
    for op, arg in program:
        if op == "obs":
            s, _ = append(s, arg)
            continue
        present = present_targets(s.observations)
        if not present:
            continue
        chosen = tuple(sorted({present[i % len(present)] for i in arg.picks}))
        compare_at_forget(s, chosen)
        s, _ = selective_replay(s, chosen)
        forgets += 1
    assert forgets >= 1


def test_oracle_without_removes_a_target_inside_an_instead_of_part():
    o = Observation("user", (Part("z1", "alice"), Part("z2", "elm street", instead_of="z1"), Part("s", "ok")))
    assert oracle.without(o, {"z2"}).parts == (Part("z1", "alice"), Part("s", "ok"))
    assert oracle.without(o, {"z1"}).parts == (Part("z2", "elm street"), Part("s", "ok"))
    assert oracle.without(oracle.without(o, {"z2"}), {"z1"}).parts == (Part("s", "ok"),)
    assert not oracle.carries(o, {"z2"}) and oracle.carries(oracle.without(o, {"z1"}), {"z2"})


def test_oracle_promised_checkpoints_follow_the_policy():
    log = (Observation("user", (Part("a", "x"),), tool="send"), Observation("user", (Part("b", "y"),)),
           Observation("memory", (Part("c", "z"),)), Observation("user", (Part("d", "w"),), compact=True))
    assert oracle.promised_checkpoints("every", log) == {0, 1, 2, 3}
    assert oracle.promised_checkpoints("start", log) == {0}
    assert oracle.promised_checkpoints("events", log) == {0, 1, 2, 3}
    assert oracle.promised_checkpoints("events", log[1:]) == {0, 1, 2}
    assert oracle.splice_point({0, 2, 5}, 5) == 2 and oracle.splice_point({0, 2, 5}, 6) == 5


def _forget_z2_then_z1(factory):
    log = [Observation("user", (Part("z2", "iban DE89"),)),
           Observation("user", (Part("z1", "alice"), Part("z2", "elm street", instead_of="z1")), reply=1)]
    rt = factory()
    for o in log:
        rt.step(o)
    rt.forget(["z2"])
    log = list(oracle.counterfactual(log, ["z2"]))
    ob = S.Observed(tuple(log), ("z1",), oracle.first_entry(log, ["z1"]),
                    forgotten=S.forgotten_parts(log, ["z1"]) + (("z2", "iban DE89"), ("z2", "elm street")))
    S.record_forget(rt, ob)
    S.record_twin(ob, factory(), oracle.counterfactual(log, ["z1"]))
    return ob


def test_privacy_statement_catches_a_log_that_keeps_a_hidden_part():
    from unsee.specs.mutants import KeepsHiddenParts

    S.privacy_nothing_forgotten_remains(_forget_z2_then_z1(ReferenceRuntime))
    with pytest.raises(S.SpecViolation, match="privacy: .* the log at t=2 still holds"):
        S.privacy_nothing_forgotten_remains(_forget_z2_then_z1(KeepsHiddenParts))


def test_privacy_allows_text_the_twin_holds_under_another_source():
    def factory():
        return ReferenceRuntime()

    stream = (Observation("user", (Part("z1", "alice lives"), Part("s1", "alice lives"))),
              Observation("user", (Part("s2", "ok"),), reply=1))
    ob = S.observe(factory, stream, ["z1"], policy="every")
    S.privacy_nothing_forgotten_remains(ob)
    ob.log_after = ob.log_after[:1] + (Observation("user", (Part("s2", "ok alice lives"),), reply=1),)
    S.privacy_nothing_forgotten_remains(ob)  # the twin holds "alice lives" too
    ob.log_after = ob.log_after[:1] + (Observation("user", (Part("s9", "z1"),), reply=1),)
    with pytest.raises(S.SpecViolation, match="still holds 'z1'"):
        S.privacy_nothing_forgotten_remains(ob)


@pytest.mark.heavy
@pytest.mark.parametrize("mutant", REPORT_MUTANTS, ids=lambda m: m.name)
def test_report_mutant_is_caught_by_the_default_run(mutant):
    """A receipt, checkpoint set or log that the oracle contradicts, with the state right: the
    default run (100 sessions) catches each and says which check broke."""
    def factory_for(cfg):
        return lambda: mutant(Config(sampling=cfg["sampling"], seed=cfg["seed"]), cfg["policy"])

    doc = verify(factory_for, examples=100, seed=0)
    assert doc["failures"], f"{mutant.name} was not caught"
    want = {"receipt-taint-one-hop": "receipt: I(z)", "compensation-args-swapped": "A3 report: compensation entry",
            "compactions-uncheckpointed": "promises checkpoints", "keeps-hidden-parts": "log"}
    assert want[mutant.name] in doc["failures"][0]["message"], doc["failures"][0]["message"]


@pytest.mark.heavy
def test_reference_reaches_every_coverage_target_in_the_default_run():
    def factory_for(cfg):
        return lambda: ReferenceRuntime(Config(sampling=cfg["sampling"], seed=cfg["seed"]), cfg["policy"])

    doc = verify(factory_for, examples=100, seed=0)
    assert doc["failures"] == []
    missed = [k for k, v in doc["targets"].items() if v["forgets"] == 0]
    assert not missed, f"the default run never reached {missed}"


class _TwoBugs(ReferenceRuntime):
    """Raises on a full reset, and reports τ one too late on a selective replay."""

    def forget(self, sources, method="B7", checkpoint=None):
        if method == "B5":
            raise RuntimeError("full reset is not implemented")
        from dataclasses import replace

        receipt = super().forget(sources, method, checkpoint)
        return replace(receipt, plan=replace(receipt.plan, tau=receipt.tau + 1))


def test_two_distinct_failures_each_come_back_with_a_runnable_trace():
    def factory_for(cfg):
        return lambda: _TwoBugs(Config(sampling=cfg["sampling"], seed=cfg["seed"]), cfg["policy"])

    # Hypothesis stops drawing at the first failure and finds the other while shrinking, or not: which
    # one a seed meets first follows the generators' draws, so this seed is re-picked when they change
    # (seed 0 reached both until the generators drew compensation boundaries, #53)
    doc = verify(factory_for, examples=100, seed=5, shrink_seconds=10)
    messages = sorted(f["message"] for f in doc["failures"])
    assert len(messages) == 2, messages
    assert "RuntimeError: full reset is not implemented" in messages[1] and "receipt: tau=" in messages[0]
    for f in doc["failures"]:
        assert f["trace"][0].startswith("from unsee.model import") and any("rt.forget(" in x for x in f["trace"])


def test_a_forgotten_part_before_tau_that_f_never_read_leaves_the_log():
    """z2 stands instead of z1 at t=1 (F never reads it) and enters at t=2: the splice is at 1,
    and the log before it must lose z2's part as well."""
    rt = ReferenceRuntime()
    log = (Observation("user", (Part("z1", "alice"), Part("z2", "elm street", instead_of="z1"))),
           Observation("memory", (Part("z2", "iban DE89"),)))
    for o in log:
        rt.step(o)
    receipt = rt.forget(["z2"])
    assert receipt.tau == 2 and receipt.checkpoint == 1
    assert tuple(rt.observations) == oracle.counterfactual(log, ["z2"])
    assert all(p.source != "z2" for o in rt.observations for p in o.parts)
