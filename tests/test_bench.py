"""The cost law as counts (asserted exactly); times go to extra_info and are never asserted."""

import pytest

from unsee.impl.bench import cost_session, fit, live_session, synthetic_graph
from unsee.model import full_reset, selective_replay, taint_closure

T = 10


@pytest.fixture(scope="module")
def sessions():
    return {tau: live_session("tiny-llama", cost_session(T, tau, 0.0, 4)[0], 4) for tau in (2, 5, 9)}


def _run(benchmark, live, op):
    out = {}

    def target(rt):
        e = rt.engine
        p0, d0 = e.tokens_prefilled, e.tokens_decoded
        rt.session, r = op(rt.session)
        out.update(r=r, prefilled=e.tokens_prefilled - p0, decoded=e.tokens_decoded - d0)

    benchmark.pedantic(target, setup=lambda: ((live.branch(),), {}), rounds=3, iterations=1)
    benchmark.extra_info.update(transitions=out["r"].transitions, tokens_prefilled=out["prefilled"],
                                tokens_decoded=out["decoded"])
    return out


@pytest.mark.parametrize("tau", [2, 5, 9])
def test_selective_replay_invokes_F_T_minus_tau_plus_1_times(benchmark, sessions, tau):
    out = _run(benchmark, sessions[tau], lambda s: selective_replay(s, ["z"]))
    assert out["r"].transitions == T - tau + 1
    assert out["decoded"] == 4 * (T - tau)  # every post-τ user turn decodes 4 tokens; o_τ^{-z} is empty


@pytest.mark.parametrize("tau", [2, 9])
def test_full_reset_invokes_F_T_times(benchmark, sessions, tau):
    out = _run(benchmark, sessions[tau], lambda s: full_reset(s, ["z"]))
    assert out["r"].transitions == T
    assert out["decoded"] == 4 * (T - 2)  # all user turns but the system prompt and the empty o_τ


@pytest.mark.parametrize("c", [1, 3])
def test_coarser_checkpoint_invokes_F_T_minus_c_times(benchmark, sessions, c):
    out = _run(benchmark, sessions[5], lambda s: selective_replay(s, ["z"], checkpoint=c))
    assert out["r"].transitions == T - c


def test_prefix_cached_reset_reuses_the_clean_prompt_blocks(benchmark, sessions):
    live = sessions[9]
    cold = _run(benchmark, live, lambda s: full_reset(s, ["z"]))
    rt = live.branch()
    rt.session, r = full_reset(rt.session, ["z"], prefix_cache=True)
    assert r.transitions == T
    assert rt.model.hits > 0 and rt.engine.tokens_decoded >= cold["decoded"]


def test_b7_cost_is_linear_in_the_suffix():
    xs = [T - tau + 1 for tau in range(1, T + 1)]
    ys = []
    for tau in range(1, T + 1):
        live = live_session("tiny-llama", cost_session(T, tau, 0.0, 2)[0], 2)
        rt = live.branch()
        e = rt.engine
        p0, d0 = e.tokens_prefilled, e.tokens_decoded
        rt.session, _ = selective_replay(rt.session, ["z"])
        ys.append(e.tokens_prefilled - p0 + e.tokens_decoded - d0)
    assert fit(xs, ys)["r2"] >= 0.999


def test_taint_closure_on_a_large_graph(benchmark):
    g, mid = synthetic_graph(100_000)
    closure = benchmark.pedantic(taint_closure, args=(g, [mid]), rounds=3, iterations=1)
    turns = 100_000 // 5
    # the middle turn's field and its 4 artifacts, then the 4 generated artifacts of every later turn
    assert len(closure) == 1 + 4 * (turns - turns // 2)
