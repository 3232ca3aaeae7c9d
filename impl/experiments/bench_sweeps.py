"""The cost law in one process: B5, B5′, B7, B7-decode and B7-oracle on branches of the same
contaminated live session, swept over τ, over the fraction of turns independent of the target
and over T, with linear fits; the provenance overhead of a step and the taint-closure query.

Costs are the engine's own counters (forward calls, tokens prefilled, tokens decoded, reply
tokens verified, prefix-cache hits) and wall time (median of repeats). "Recomputed tokens" =
prefilled + decoded + verified: every token any forward pushed through the model (re-materialized
context included, as prefilled).
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict

import networkx as nx

from unsee.impl.experiments.bench_sessions import SHAPES, live_session, sweep_taus
from unsee.impl.experiments.oracle import METHOD as ORACLE, oracle_replay
from unsee.model.plan import taint_closure


def _measure(live, method: str, independent=frozenset(), repeats: int = 1) -> tuple[dict, object]:
    times, last = [], None
    for _ in range(repeats):
        rt = live.branch()
        e, lm = rt.engine, rt.model
        p0, d0, v0, f0, h0 = e.tokens_prefilled, e.tokens_decoded, e.tokens_verified, e.forwards, lm.hits
        t0 = time.perf_counter()
        if method == ORACLE:  # the labelled comparison that trusts the independence marking
            r = oracle_replay(rt, ["z"], independent)
        elif method in ("B5", "B5'", "B7", "B7-decode"):  # B7-decode: Algorithm 1 as written, no drafts
            r = rt.forget(["z"], method)
        else:
            raise ValueError(f"no method {method!r}")
        times.append(time.perf_counter() - t0)
        verified = e.tokens_verified - v0  # a part of the engine's prefilled tokens
        last = (rt, {"transitions": r.transitions, "tokens_prefilled": e.tokens_prefilled - p0 - verified,
                     "tokens_decoded": e.tokens_decoded - d0, "tokens_verified": verified, "forwards": e.forwards - f0,
                     "prefix_hits": lm.hits - h0, "tokens_rematerialized": r.work.tokens_rematerialized,
                     "replies": r.work.replies, "replies_skipped": r.work.replies_skipped})
    rt, d = last
    d["recomputed"] = d["tokens_prefilled"] + d["tokens_decoded"] + d["tokens_verified"]  # every forward's tokens
    d["seconds_median"] = statistics.median(times)
    return d, rt


def fit(xs, ys) -> dict:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    intercept = my - slope * mx
    ss_res = sum((y - (slope * x + intercept)) ** 2 for x, y in zip(xs, ys))
    ss_tot = sum((y - my) ** 2 for y in ys)
    return {"slope": slope, "intercept": intercept, "r2": 1.0 if ss_tot == 0 else 1 - ss_res / ss_tot}


# The τ sweep's methods: B7 as shipped (recorded replies as drafts, each checked by F) and
# B7-decode (Algorithm 1 as written: every post-τ reply decoded), against B5 and B5′.
SWEEP_METHODS = ("B5", "B5'", "B7", "B7-decode")


def tau_sweep(model: str, T: int, reply: int, repeats: int, on_point=None, shape: str = "short",
              methods=SWEEP_METHODS) -> list[dict]:
    rows = []
    for tau in sweep_taus(shape, T):
        obs, _ = SHAPES[shape](T, tau, 0.0, reply)
        live = live_session(model, obs, reply)
        row = {"tau": tau, "suffix": T - tau + 1}
        for m in methods:
            row[m], _ = _measure(live, m, repeats=repeats)
        rows.append(row)
        if on_point:
            on_point()
    return rows


def indep_sweep(model: str, T: int, tau: int, indeps, reply: int, repeats: int, on_point=None,
                shape: str = "short") -> list[dict]:
    from unsee.impl.engine.exact import compare, max_abs_kv_diff

    rows = []
    for indep in indeps:
        obs, independent = SHAPES[shape](T, tau, indep, reply)
        live = live_session(model, obs, reply)
        row = {"indep": indep, "independent_turns": sorted(independent)}
        ref = None
        for m in ("B5", "B5'", "B7", "B7-oracle"):
            row[m], rt = _measure(live, m, independent, repeats=repeats)
            if m == "B5":
                ref = rt
            else:
                eq = compare(rt, ref)
                row[m]["token_equal"] = eq["transcript"]
                row[m]["bit_exact"] = all(eq.values())
                row[m]["max_abs_dkv"] = max_abs_kv_diff(rt, ref)
        rows.append(row)
        if on_point:
            on_point()
    return rows


def flat_in_T(model: str, suffix: int, Ts, reply: int, shape: str = "short") -> list[dict]:
    rows = []
    for T in Ts:
        obs, _ = SHAPES[shape](T, T - suffix + 1, 0.0, reply)
        live = live_session(model, obs, reply)
        b7, _ = _measure(live, "B7")
        b5, _ = _measure(live, "B5")
        rows.append({"T": T, "suffix": suffix, "B7_recomputed": b7["recomputed"], "B5_recomputed": b5["recomputed"],
                     "B7_seconds": b7["seconds_median"], "B5_seconds": b5["seconds_median"]})
    return rows


def provenance_overhead(model: str, T: int, reply: int, shape: str = "short") -> dict:
    """Share of step time spent recording provenance (artifacts, parents, source ids)."""
    from unsee.model import state as S

    from unsee.impl.experiments.timing import Stopwatch, timing

    obs, _ = SHAPES[shape](T, 2, 0.0, reply)
    watch = Stopwatch()
    with timing(watch, [(S._Turn, "artifact", "provenance"), (S._Turn, "field", "provenance")]):
        t0 = time.perf_counter()
        live = live_session(model, obs, reply)
        total = time.perf_counter() - t0
    spent = watch.seconds.get("provenance", 0.0)
    cps = live.session.checkpoints
    sizes = [len(json.dumps(asdict(c))) for c in cps]
    kv = live.name == "kv"  # a transformers model; the reference model has no KVEngine and no K/V pages
    verify = live.engine.verify_seconds if kv else 0.0  # prefills that check each reply's fixed point
    capture = live.model.capture_seconds if kv else 0.0  # slicing K/V pages out of the cache
    return {"step_seconds": total, "provenance_seconds": spent, "fraction": spent / total,
            "verify_seconds": verify, "verify_fraction": verify / total,
            "page_capture_seconds": capture, "page_capture_fraction": capture / total,
            "artifacts": len(live.session.state.artifacts), "checkpoints": len(cps),
            "checkpoint_bytes_mean": statistics.mean(sizes), "checkpoint_bytes_max": max(sizes)}


def synthetic_graph(n_artifacts: int, per_turn: int = 5) -> tuple[nx.DiGraph, str]:
    """The scaffold's conservative graph shape: each turn a field, then blocks chained to
    the previous turn's last block. Returns the graph and the field of the middle turn."""
    g = nx.DiGraph()
    turns = max(1, n_artifacts // per_turn)
    prev = None
    mid = None
    for t in range(turns):
        f = f"t{t}.f"
        g.add_node(f)
        if t == turns // 2:
            mid = f
        last = f
        for j in range(per_turn - 1):
            a = f"t{t}.{j}"
            g.add_edge(f, a)
            if prev is not None:
                g.add_edge(prev, a)
            if j:
                g.add_edge(last, a)
            last = a
        prev = last
    return g, mid


def closure_timing(sizes) -> list[dict]:
    rows = []
    for n in sizes:
        g, mid = synthetic_graph(n)
        t0 = time.perf_counter()
        closure = taint_closure(g, [mid])
        rows.append({"artifacts": g.number_of_nodes(), "closure": len(closure), "seconds": time.perf_counter() - t0})
        del g
    return rows
