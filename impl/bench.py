"""The cost law, measured: B5, B5′ and B7 side by side on the same contaminated sessions.

Costs are the engine's own counters (forward calls, tokens prefilled, tokens decoded,
prefix-cache hits) and wall time (median of repeats). "Recomputed tokens" = prefilled +
decoded: what a method had to push through the model.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict

import networkx as nx

from unsee.model.session import full_reset, selective_replay, taint_closure
from unsee.model.state import Config, Observation, Part

SYSTEM = "You are a helpful assistant. Keep answers short."
FACT = "The user's home address is 42 Wallaby Way, Sydney."
DEPENDENT = "Use what you know about me for the next step of my errand."
INDEPENDENT = "Unrelated question: name a colour of the rainbow."


def cost_session(T: int, tau: int, indep: float, reply: int = 8) -> tuple[list[Observation], frozenset[int]]:
    """T observations, the target (a memory fact) at τ, no compaction; after τ, a fraction
    `indep` of the turns are independent of it (the oracle's marking is returned)."""
    obs, independent = [], set()
    post = list(range(tau + 1, T + 1))
    n_ind = round(len(post) * indep)
    ind_turns = set(post[len(post) - n_ind:]) if n_ind else set()  # independent turns come last
    for t in range(1, T + 1):
        if t == tau:
            obs.append(Observation("memory", (Part("z", FACT),)))
        elif t == 1:
            obs.append(Observation("system", (Part("sys", SYSTEM),)))
        elif t in ind_turns:
            obs.append(Observation("user", (Part(f"u{t}", INDEPENDENT),), reply=reply))
            independent.add(t)
        else:
            obs.append(Observation("user", (Part(f"u{t}", DEPENDENT),), reply=reply))
    return obs, frozenset(independent)


def _measure(live, method: str, independent=frozenset(), repeats: int = 1) -> tuple[dict, object]:
    times, last = [], None
    for _ in range(repeats):
        rt = live.branch()
        e, lm = rt.engine, rt.model
        p0, d0, f0, h0 = e.tokens_prefilled, e.tokens_decoded, e.forwards, lm.hits
        t0 = time.perf_counter()
        if method == "B5":
            rt.session, r = full_reset(rt.session, ["z"])
        elif method == "B5'":
            rt.session, r = full_reset(rt.session, ["z"], prefix_cache=True)
        elif method == "B7":
            rt.session, r = selective_replay(rt.session, ["z"])
        else:  # B7-oracle, B7-verify
            rt.session, r = selective_replay(rt.session, ["z"], independent=independent, mode=method.split("-")[1])
        times.append(time.perf_counter() - t0)
        last = (rt, {"transitions": r.transitions, "tokens_prefilled": e.tokens_prefilled - p0,
                     "tokens_decoded": e.tokens_decoded - d0, "forwards": e.forwards - f0,
                     "prefix_hits": lm.hits - h0, "tokens_rematerialized": r.tokens_rematerialized})
    rt, d = last
    d["recomputed"] = d["tokens_prefilled"] + d["tokens_decoded"]
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


def live_session(model: str, obs, reply: int):
    from unsee.impl.agent import KVRuntime

    live = KVRuntime(model, Config(plan_tokens=min(8, reply), summary_tokens=reply))
    for o in obs:
        live.step(o)
    return live


def tau_sweep(model: str, T: int, reply: int, repeats: int, on_point=None) -> list[dict]:
    rows = []
    for tau in range(1, T + 1):
        obs, _ = cost_session(T, tau, 0.0, reply)
        live = live_session(model, obs, reply)
        row = {"tau": tau, "suffix": T - tau + 1}
        for m in ("B5", "B5'", "B7"):
            row[m], _ = _measure(live, m, repeats=repeats)
        rows.append(row)
        if on_point:
            on_point()
    return rows


def indep_sweep(model: str, T: int, tau: int, indeps, reply: int, repeats: int, on_point=None) -> list[dict]:
    from unsee.impl.exact import compare, max_abs_kv_diff

    rows = []
    for indep in indeps:
        obs, independent = cost_session(T, tau, indep, reply)
        live = live_session(model, obs, reply)
        row = {"indep": indep, "independent_turns": sorted(independent)}
        ref = None
        for m in ("B5", "B5'", "B7", "B7-oracle", "B7-verify"):
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


def flat_in_T(model: str, suffix: int, Ts, reply: int) -> list[dict]:
    rows = []
    for T in Ts:
        obs, _ = cost_session(T, T - suffix + 1, 0.0, reply)
        live = live_session(model, obs, reply)
        b7, _ = _measure(live, "B7")
        b5, _ = _measure(live, "B5")
        rows.append({"T": T, "suffix": suffix, "B7_recomputed": b7["recomputed"], "B5_recomputed": b5["recomputed"],
                     "B7_seconds": b7["seconds_median"], "B5_seconds": b5["seconds_median"]})
    return rows


def provenance_overhead(model: str, T: int, reply: int) -> dict:
    """Share of step time spent recording provenance (artifacts, parents, source ids)."""
    from unsee.model import state as S

    spent = [0.0]
    orig_artifact, orig_field = S._Turn.artifact, S._Turn.field

    def timed(fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[0] += time.perf_counter() - t0
        return wrapper

    obs, _ = cost_session(T, 2, 0.0, reply)
    S._Turn.artifact, S._Turn.field = timed(orig_artifact), timed(orig_field)
    try:
        t0 = time.perf_counter()
        live = live_session(model, obs, reply)
        total = time.perf_counter() - t0
    finally:
        S._Turn.artifact, S._Turn.field = orig_artifact, orig_field
    cps = live.session.checkpoints
    sizes = [len(json.dumps(asdict(c))) for c in cps]
    return {"step_seconds": total, "provenance_seconds": spent[0], "fraction": spent[0] / total,
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


def cost_law(model: str = "tiny-llama", T: int = 16, indeps=(0.0, 0.25, 0.5, 0.75, 1.0), reply: int = 8,
             repeats: int = 3, closure_sizes=(10**3, 10**4, 10**5, 10**6), on_point=None) -> dict:
    taus = tau_sweep(model, T, reply, repeats, on_point)
    xs = [r["suffix"] for r in taus]
    f_tok = fit(xs, [r["B7"]["recomputed"] for r in taus])
    f_tr = fit(xs, [r["B7"]["transitions"] for r in taus])
    paper_T = max(T, 13)
    paper_tau = paper_T - 12  # the paper's shape: 12 turns past the target
    shape = indep_sweep(model, paper_T, paper_tau, list(indeps), reply, repeats, on_point)
    half = next((r for r in shape if r["indep"] == 0.5), shape[0])
    doc = {
        "model": model, "T": T, "reply_tokens": reply, "repeats": repeats,
        "tau_sweep": taus, "indep_sweep": shape,
        "fit": {**f_tok, "of": "B7 recomputed tokens vs T-tau+1"}, "fit_transitions": f_tr,
        "paper_shape": {"T": paper_T, "tau": paper_tau, "indep": half["indep"]},
        "ratio_full_reset": half["B5"]["recomputed"] / half["B7"]["recomputed"],
        "ratio_prefix_cached": half["B5'"]["recomputed"] / half["B7"]["recomputed"],
        "flat_in_T": flat_in_T(model, 4, (8, 16, 32, 64), reply),
        "provenance": provenance_overhead(model, T, reply),
        "closure_query": closure_timing(closure_sizes),
    }
    return doc


def plot(doc: dict, path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    taus = [r["tau"] for r in doc["tau_sweep"]]
    for m, style in (("B5", "s-"), ("B5'", "^-"), ("B7", "o-")):
        ax[0].plot(taus, [r[m]["recomputed"] for r in doc["tau_sweep"]], style, label=m)
    ax[0].set_xlabel("injection step τ")
    ax[0].set_ylabel("tokens recomputed")
    ax[0].set_title(f"cost vs τ (T={doc['T']}, {doc['model']}); B7 fit R²={doc['fit']['r2']:.4f}")
    ax[0].legend()
    ind = [r["indep"] for r in doc["indep_sweep"]]
    for m, style in (("B5", "s-"), ("B5'", "^-"), ("B7", "o-"), ("B7-oracle", "d--"), ("B7-verify", "x--")):
        ax[1].plot(ind, [r[m]["tokens_decoded"] for r in doc["indep_sweep"]], style, label=m)
    ax[1].set_xlabel("indep (fraction of post-τ turns independent of z)")
    ax[1].set_ylabel("tokens decoded")
    ax[1].set_title(f"decode cost vs indep (T={doc['paper_shape']['T']}, τ={doc['paper_shape']['tau']})")
    ax[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [str(path)]
