"""One scenario per test: each statement on the reference runtime, named by its outcome."""

import pytest
from hypothesis import given, strategies as st

from unsee.model import Config, Observation, Part, UnknownSource
from unsee.specs.reference import ReferenceRuntime
from unsee.specs import oracle
from unsee.specs import statements as S
from unsee.specs.strategies import configs, observations

SESSION = (
    Observation("system", (Part("sys", "you are an agent"),)),
    Observation("user", (Part("u1", "plan the trip"),), reply=2),
    Observation("memory", (Part("z", "alice lives at 12 elm street"),)),
    Observation("user", (Part("u2", "send it"),), reply=1, tool="send"),
    Observation("tool", (Part("t1", "ok"),), reply=2, tool="lookup", compact=True),
    Observation("user", (Part("u3", "thanks"),), reply=2),
)


def factory(policy="every", **cfg):
    return lambda: ReferenceRuntime(Config(**cfg), policy)


@given(cfg=configs, stream=st.lists(observations(), min_size=0, max_size=6), pos=st.integers(0, 6),
       z=st.sampled_from(("z1", "z2")), text=st.sampled_from(("alice at elm", "", "iban DE89")))
def test_every_statement_holds_on_the_reference(cfg, stream, pos, z, text):
    stream.insert(min(pos, len(stream)), Observation("memory", (Part(z, text),)))
    ob = S.observe(factory(cfg["policy"], sampling=cfg["sampling"], seed=cfg["seed"]), stream, [z], policy=cfg["policy"])
    S.check_all(ob)


def test_selective_replay_costs_T_minus_tau_plus_1():
    ob = S.observe(factory(), SESSION, ["z"])
    assert (ob.tau, ob.T) == (3, 6)
    assert ob.receipt.checkpoint == 2
    assert ob.receipt.transitions == 4 == ob.T - ob.tau + 1
    S.check_all(ob)


def test_full_reset_costs_T():
    ob = S.observe(factory(), SESSION, ["z"], method="B5")
    assert ob.receipt.transitions == 6 == ob.twin_invocations
    S.check_all(ob)


@pytest.mark.parametrize("c", [0, 1])
def test_coarser_checkpoint_costs_T_minus_c(c):
    ob = S.observe(factory(), SESSION, ["z"], checkpoint=c)
    assert ob.receipt.transitions == 6 - c
    S.check_all(ob)


def test_session_start_policy_replays_everything():
    ob = S.observe(factory("start"), SESSION, ["z"])
    assert ob.receipt.checkpoint == 0 and ob.receipt.transitions == 6
    S.check_all(ob)


def test_compaction_after_tau_forces_rematerialized_prefix():
    from unsee.impl.engine.kv_runtime import make_runtime  # the reference model, metered as an engine is

    rt = make_runtime("reference")
    for o in SESSION:
        rt.step(o)
    assert rt.forget(["z"]).work.tokens_rematerialized > 0  # the compaction at t=5 rebuilt the cache
    S.check_all(S.observe(lambda: make_runtime("reference"), SESSION, ["z"]))


def test_changed_side_effect_is_listed_for_compensation():
    ob = S.observe(factory(), SESSION, ["z"])
    comp = ob.receipt.compensation
    assert [c.call_id for c in comp] == ["call-t4"]
    assert comp[0].reason == "arguments differ"
    S.assumption_a3_side_effects(ob)  # the report matches the twin; nothing fired twice
    assert ob.world_after == ob.world_before


def test_wrong_compensation_report_is_caught():
    ob = S.observe(factory(), SESSION, ["z"])
    object.__setattr__(ob.receipt, "compensation", ())
    with pytest.raises(S.SpecViolation, match="A3 report"):
        S.assumption_a3_side_effects(ob)


def test_unseeded_sampling_is_reported_as_a1_violation():
    with pytest.raises(S.AssumptionViolated, match="A1 violated"):
        S.assumption_a1_deterministic_decoding(factory(sampling=True, seed=None), SESSION)
    S.assumption_a1_deterministic_decoding(factory(sampling=True, seed=7), SESSION)


def test_empty_counterfactual_observation_stays_a_transition():
    stream = SESSION[:2] + (Observation("user", (Part("z", "secret"),)),) + SESSION[3:]
    ob = S.observe(factory(), stream, ["z"])
    assert ob.twin_invocations == len(stream)
    S.check_all(ob)


def test_forgetting_an_unknown_source_is_a_clear_error():
    rt = factory()()
    for o in SESSION:
        rt.step(o)
    before = rt.digest()
    with pytest.raises(UnknownSource, match="never entered this session"):
        rt.forget(["nope"])
    assert rt.digest() == before
    rt.forget(["z"])
    with pytest.raises(UnknownSource, match="already forgotten"):
        rt.forget(["z"])


def test_tampered_state_breaks_theorem1():
    ob = S.observe(factory(), SESSION, ["z"])
    ob.after = dict(ob.after, kv="0" * 16)
    with pytest.raises(S.SpecViolation, match=r"Theorem 1.*\['kv'\]"):
        S.theorem1_splicing_equivalence(ob)


def test_a_graph_that_loses_an_edge_breaks_lemma2_i_even_when_the_closure_does_not_shrink():
    ob = S.observe(factory(), SESSION, ["z"])
    S.lemma2_taint_monotonicity(ob)
    g = ob.graphs[3].copy()
    u, v = next((u, v) for u, v in ob.graphs[2].edges if g.in_degree(v) > 1)  # v stays reachable
    g.remove_edge(u, v)
    ob.graphs[3] = g
    assert oracle.taint_closure(g, ob.sources) >= oracle.taint_closure(ob.graphs[2], ob.sources)  # I(z) did not shrink
    with pytest.raises(S.SpecViolation, match="E_2 ⊄ E_3"):
        S.lemma2_taint_monotonicity(ob)


def test_theorem1_is_checked_at_every_t_from_the_splice_point():
    ob = S.observe(factory(), SESSION, ["z"])
    assert ob.trajectory is not None and len(ob.trajectory) == ob.T - ob.receipt.checkpoint + 1
    S.theorem1_splicing_equivalence(ob)
    t = ob.receipt.checkpoint + 2  # an intermediate state of the replay, not R̃_T
    ob.trajectory[2] = {**ob.trajectory[2], "memory": "0" * 16}
    with pytest.raises(S.SpecViolation, match=f"R̃_{t} ≠ R\\^-z_{t}"):
        S.theorem1_splicing_equivalence(ob)


def test_restore_refuses_a_cache_that_does_not_hold_the_checkpoints_context():
    """A crop one token short leaves every other layer right; restore's length check sees it
    (the same fault that `proofs.code`'s broken restore shows only its contract can catch
    without this check)."""
    from dataclasses import replace

    from unsee.model.lm import ReferenceLM
    from unsee.model.errors import UnseeError
    from unsee.model.replay import restore

    rt = ReferenceRuntime(Config(), "every")
    for o in SESSION[:4]:
        rt.step(o)
    s = rt.session
    c = s.checkpoints[2]
    assert restore(s, c).kv == s.state.kv[: c.token_offset]

    class ShortCrop(ReferenceLM):
        def crop(self, kv, n):
            return kv[: n - 1]

    with pytest.raises(UnseeError, match="restored a cache of"):
        restore(replace(s, lm=ShortCrop()), c)
