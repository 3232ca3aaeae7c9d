"""The cost law, measured (`unsee bench cost-law`): B5, B5′ and B7 side by side on the same
contaminated sessions. `cost_law` assembles the document from the sessions of `bench_sessions`,
the in-process sweeps of `bench_sweeps` and, at the agent shape, the fresh processes of
`bench_cross`; `bench_plot` draws it."""

from __future__ import annotations

from unsee.impl.experiments.bench_cross import cross_process
from unsee.impl.experiments.bench_sessions import AGENT_SUFFIX, AGENT_SYSTEM, AGENT_TOOLS, SHAPES, load_template, machine
from unsee.impl.experiments.bench_sweeps import (SWEEP_METHODS, closure_timing, fit, flat_in_T, indep_sweep,
                                                 provenance_overhead, tau_sweep)

# The paper's shape (Experiments): the target 12 transitions before the end, so T−τ+1 = 12 and
# a short session needs T ≥ 13. The flat-in-T check holds the suffix at 4 and doubles T.
PAPER_SUFFIX = 12
FLAT_SUFFIX = 4
FLAT_TS = (8, 16, 32, 64)


def _pick(rows: list[dict]) -> dict:
    """The row the headline ratios quote: indep 0.5 if it was swept, else the first."""
    return next((r for r in rows if r["indep"] == 0.5), rows[0])


def _ratio(a, b):
    return None if a is None or not b else a / b


def cost_law(model: str = "tiny-llama", T: int = 16, indeps=(0.0, 0.25, 0.5, 0.75, 1.0), reply: int = 8,
             repeats: int = 3, closure_sizes=(10**3, 10**4, 10**5, 10**6), on_point=None, shape: str = "short",
             cross: bool = False, workdir=None, sweep_tau: bool = True, sweep_methods=SWEEP_METHODS) -> dict:
    """shape "short": cost_session, every τ, the paper's shape 12 turns past the target.
    shape "agent": agent_session, a few τ (AGENT_SUFFIXES), the target 12 turns before the end
    (suffix 12); with cross=True, B5 and B7 also forget it in fresh processes (`cross_process`)."""
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {', '.join(SHAPES)}, got {shape!r}")
    if cross and shape != "agent":
        raise ValueError("the cross-process run is measured at the agent shape (--shape agent)")
    if shape == "agent" and T < AGENT_SUFFIX + 1:
        raise ValueError(f"the agent shape needs T >= {AGENT_SUFFIX + 1} (a system prompt and {AGENT_SUFFIX} turns)")
    unknown = set(sweep_methods) - set(SWEEP_METHODS)
    if unknown or "B7" not in sweep_methods:
        raise ValueError(f"the τ sweep measures B7 and any of {', '.join(SWEEP_METHODS)}; got {list(sweep_methods)}")
    taus = tau_sweep(model, T, reply, repeats, on_point, shape, tuple(sweep_methods)) if sweep_tau else []
    xs = [r["suffix"] for r in taus]
    f_tok = fit(xs, [r["B7"]["recomputed"] for r in taus]) if taus else None
    f_tr = fit(xs, [r["B7"]["transitions"] for r in taus]) if taus else None
    f_alg1 = fit(xs, [r["B7-decode"]["recomputed"] for r in taus]) if taus and "B7-decode" in sweep_methods else None
    if shape == "short":  # the paper's shape: 12 turns past the target, where T allows (--T is honoured)
        paper_T, paper_tau = T, max(1, T - PAPER_SUFFIX)
    else:
        paper_T, paper_tau = T, T - AGENT_SUFFIX + 1  # 12 turns before the end: suffix 12
    rows = indep_sweep(model, paper_T, paper_tau, list(indeps), reply, repeats, on_point, shape)
    half = _pick(rows)
    ind = [r["indep"] for r in rows]
    doc = {
        "fit_decoded_vs_indep": fit(ind, [r["B7"]["tokens_decoded"] for r in rows]) if len(set(ind)) > 1 else None,
        "model": model, "shape": shape, "T": T, "reply_tokens": reply, "repeats": repeats, "machine": machine(),
        "tau_sweep": taus, "indep_sweep": rows,
        "fit": f_tok and {**f_tok, "of": "B7 recomputed tokens vs T-tau+1"}, "fit_transitions": f_tr,
        "fit_algorithm1": f_alg1 and {**f_alg1, "of": "B7-decode (every reply decoded) recomputed tokens vs T-tau+1"},
        "paper_shape": {"T": paper_T, "tau": paper_tau, "indep": half["indep"], "suffix": paper_T - paper_tau + 1},
        "ratio_full_reset": half["B5"]["recomputed"] / half["B7"]["recomputed"],
        "ratio_prefix_cached": half["B5'"]["recomputed"] / half["B7"]["recomputed"],
        "ratio_seconds_full_reset_in_process": _ratio(half["B5"]["seconds_median"], half["B7"]["seconds_median"]),
        "ratio_seconds_prefix_cached": _ratio(half["B5'"]["seconds_median"], half["B7"]["seconds_median"]),
    }
    if shape == "agent":
        doc["system_prompt"] = {"tools": len(AGENT_TOOLS), "words": len(AGENT_SYSTEM.split()),
                                "tokens": len(load_template(model).block("system", AGENT_SYSTEM))}
    if cross:
        xp = cross_process(model, paper_T, paper_tau, list(indeps), reply, repeats, workdir, on_point)
        row = _pick(xp)
        doc["cross_process"] = xp
        doc["ratio_seconds_full_reset"] = _ratio(row["B5"]["seconds"], row["B7"]["seconds"])
        doc["ratio_seconds_prefix_cached_cross_process"] = _ratio(row["B5'"]["seconds"], row["B7"]["seconds"])
        doc["ratio_process_seconds_full_reset"] = _ratio(row["B5"]["process_seconds"], row["B7"]["process_seconds"])
        doc["tokens_rematerialized"] = row["B7"]["tokens_rematerialized"]
        doc["tokens_restored"] = row["B7"]["tokens_restored"]
        doc["load_seconds"] = row["B7"]["load_seconds"]
    if not sweep_tau:
        doc["flat_in_T"] = []
    elif shape == "short":  # sessions of every length in FLAT_TS up to T, and T itself
        doc["flat_in_T"] = flat_in_T(model, min(FLAT_SUFFIX, T), sorted({t for t in FLAT_TS if t <= T} | {T}), reply)
    else:
        doc["flat_in_T"] = flat_in_T(model, AGENT_SUFFIX, sorted({t for t in (16, 32) if t <= T} | {T}), reply, shape)
    doc["provenance"] = provenance_overhead(model, T, reply, shape)
    doc["closure_query"] = closure_timing(closure_sizes)
    return doc
