"""An audit beside the paper: per suite, the paper's figures (as its text states them) next to
the episodes of an audit journal, with confidence intervals and the paper's ordering claims
checked episode by episode.

    python -m unsee.impl.experiments.side_by_side --model recall-smollm2 \\
        --journal memory=docs/results/audit-recall-smollm2-memory.journal.jsonl ... \\
        --markdown docs/results/audit-recall-smollm2-paper.md --plot docs/results/audit-recall-smollm2-paper.png

Everything on unsee's side is computed here from the journals' episodes (a journal holds every
finished episode, so a partial run is summarised as what it is: n is its episode count). The
paper's side is what its text says (arXiv 2609.04875, §Experiments; its Tables 1–3 are images,
so only the figures its prose gives are here, each with the words it comes from).

Intervals: Wilson 95 % for a rate over episodes; for the KL divergence a percentile bootstrap
(2,000 resamples, seeded) of the mean over episodes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
from pathlib import Path

# What the paper's prose states (Llama-3.1-8B-Instruct; LongMemEval ↔ memory, AgentDojo ↔
# agentdojo, the behavioural-extraction suite ↔ preference). Ranges span its suites.
PAPER = {
    "any_leak": {"B0": ("0.86–1.00", "deleting the persistent memory record leaves leakage exactly unchanged from "
                                     "doing nothing (0.86–1.00 any-leak)"),
                 "B1": ("= B0", "B1 equals B0 in every cell"),
                 "B3": ("0.84 / 0.94", "the model's summary and plan re-emit the target (0.84/0.94 any-leak)"),
                 "B8": ("0.92–1.00", "B8 (IFC only) blocks identifier sinks yet leaks at the B0 rate through free "
                                     "text (0.92–1.00)"),
                 "B9": ("0", "adding replay (B9) drops it to zero"),
                 "B7": ("0", "B7 matches B5 exactly (any-leak 0, CAD 0, agreement 1.0)")},
    "leak_at_probes": {"B2": ("1.00", "B2's Leak@probes is 1.00 on all three suites"),
                       "B3": ("0.73–0.97", "B3's paraphrased derivations yield 0.73–0.97"),
                       "B7": ("0", "B7 sits at the B5 floor: zero under every probe")},
    "cad": {"B4": ("0.22", "removes artifacts present in the counterfactual (CAD 0.22)"),
            "B7": ("0", "any-leak 0, CAD 0")},
    "avoid_rate": {"B0": ("1.00", "B0, B1, B2 and B6 … act on the revoked preference in 100% of episodes"),
                   "B1": ("1.00", "idem"), "B2": ("1.00", "idem"),
                   "B5": ("0.32", "The zero point is measured (B5 = 0.32)"),
                   "B7": ("= B5", "B7 and B5′ match the reference (+0.00)")},
}
METRICS = ("any_leak", "action_leak", "leak_at_probes", "cad", "divergence_kl", "avoid_rate")
RATES = {"any_leak", "action_leak", "leak_at_probes", "leak_at_5", "avoid_rate"}
# B7 ≡ B5 is checked on everything but the independent samples (drawn with each method's own
# seeds, by design) and the transition count.
NOT_COMPARED = {"leak_at_5_independent", "transitions"}


def read_journal(path: Path) -> tuple[dict, list[dict]]:
    """(header, episode results in index order) of an audit journal, plain or gzipped."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    header, eps = lines[0], sorted(lines[1:], key=lambda r: r["i"])
    return header, [r["result"] for r in eps]


def wilson(k: float, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def bootstrap(xs: list[float], reps: int = 2000, seed: int = 0) -> tuple[float, float]:
    if not xs:
        return (math.nan, math.nan)
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(xs, k=len(xs))) / len(xs) for _ in range(reps))
    return (means[int(0.025 * reps)], means[int(0.975 * reps) - 1])


def column(eps: list[dict], method: str, metric: str) -> list[float]:
    return [e["rows"][method][metric] for e in eps if method in e["rows"] and e["rows"][method].get(metric) is not None]


def cell(eps: list[dict], method: str, metric: str) -> dict | None:
    xs = column(eps, method, metric)
    if not xs:
        return None
    mean = sum(xs) / len(xs)
    lo, hi = wilson(sum(xs), len(xs)) if metric in RATES else bootstrap(xs)
    return {"mean": mean, "lo": lo, "hi": hi, "n": len(xs)}


def _same(a: dict, b: dict) -> bool:
    return {k: v for k, v in a.items() if k not in NOT_COMPARED} == {k: v for k, v in b.items() if k not in NOT_COMPARED}


def checks(eps: list[dict]) -> list[tuple[str, bool | None, str]]:
    """The paper's ordering claims on these episodes: (claim, holds (None: not measured), evidence)."""
    have = set(eps[0]["rows"]) if eps else set()
    n = len(eps)
    out = []
    b0 = column(eps, "B0", "any_leak")
    b5 = column(eps, "B5", "any_leak")
    if b0:
        rate = sum(b0) / len(b0)
        out.append(("B0 leaks (any-leak ≥ 0.5)", rate >= 0.5, f"B0 any-leak {rate:.2f} over {len(b0)} episodes "
                    f"(B5 {sum(b5) / len(b5):.2f})"))
    if {"B0", "B1"} <= have:
        same = sum(e["rows"]["B1"]["any_leak"] == e["rows"]["B0"]["any_leak"] for e in eps)
        b1 = column(eps, "B1", "any_leak")
        out.append(("B1 ≈ B0 (deleting the record changes nothing)", same == n,
                    f"B1 any-leak {sum(b1) / max(1, len(b1)):.2f} vs B0 {sum(b0) / max(1, len(b0)):.2f}; "
                    f"equal in {same} of {n} episodes"))
    if {"B0", "B8"} <= have:
        act = column(eps, "B8", "action_leak")
        ex = column(eps, "B8", "exact_leak")
        both = sum(e["rows"]["B8"]["any_leak"] == e["rows"]["B0"]["any_leak"] for e in eps)
        holds = (not any(act)) and sum(ex) > 0 if sum(b0) else None  # nothing to leak where B0 does not
        out.append(("B8 leaks via free text only", holds if ex else None,
                    f"B8 action-leak {sum(act) / max(1, len(act)):.2f}, free-text (exact) leak "
                    f"{sum(ex) / max(1, len(ex)):.2f}; B8 any-leak equals B0's in {both} of {n} episodes"))
    if {"B5", "B7"} <= have:
        same = sum(_same(e["rows"]["B7"], e["rows"]["B5"]) for e in eps)
        floor = {k for e in eps for k, v in e["rows"]["B5"].items()
                 if isinstance(v, float) and v and k not in NOT_COMPARED | {"utility"}}
        out.append(("B7 = B5 at the floor", same == n,
                    f"B7's row equals B5's in {same} of {n} episodes (every metric but the independent samples); "
                    + (f"B5 non-zero (floor flagged) on {', '.join(sorted(floor))}" if floor else "B5 is 0 on every "
                       "leak metric, KL and CAD")))
    return out


def _fmt(c: dict | None, digits: int = 2) -> str:
    if c is None:
        return "–"
    return f"{c['mean']:.{digits}f} [{c['lo']:.{digits}f}, {c['hi']:.{digits}f}]"


def suite_markdown(suite: str, header: dict, eps: list[dict]) -> list[str]:
    methods = [m for m in ("B0", "B1", "B2", "B3", "B4", "B5", "B6", "B7", "B8", "B9", "span") if eps and m in eps[0]["rows"]]
    metrics = [k for k in METRICS if any(cell(eps, m, k) for m in methods)]
    out = [f"## {suite}: n = {len(eps)} episodes (model {header['model']}, {header['tokens']} tokens, "
           f"{header['attn']} attention, seed {header['seed']})", "",
           "unsee: mean [95 % interval] over the episodes; paper: the figure its text gives (– where it gives none).",
           "", "| method | " + " | ".join(f"{k} (unsee) | {k} (paper)" for k in metrics) + " |",
           "|---|" + "---|" * (2 * len(metrics))]
    for m in methods:
        cells = []
        for k in metrics:
            cells += [_fmt(cell(eps, m, k), 3 if k == "divergence_kl" else 2), PAPER.get(k, {}).get(m, ("–",))[0]]
        out.append(f"| {m}{' (floor)' if m == 'B5' else ''} | " + " | ".join(cells) + " |")
    out += ["", "Ordering claims of the paper, on these episodes:", ""]
    for claim, holds, evidence in checks(eps):
        verdict = {True: "holds", False: "**does not hold**", None: "cannot be told here"}[holds]
        out.append(f"- {claim}: {verdict}. {evidence}.")
    return out + [""]


def plot(suites: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(suites), figsize=(4.2 * len(suites), 6.4), squeeze=False)
    for j, (suite, (_, eps)) in enumerate(suites.items()):
        methods = [m for m in ("B0", "B1", "B2", "B3", "B4", "B5", "B6", "B7", "B8", "B9", "span") if eps and m in eps[0]["rows"]]
        for i, (metric, label) in enumerate((("any_leak", "any-leak"), ("divergence_kl", "KL from B5 (nats)"))):
            ax = axes[i][j]
            cs = [cell(eps, m, metric) for m in methods]
            xs = range(len(methods))
            ys = [c["mean"] if c else 0 for c in cs]
            err = [[(c["mean"] - c["lo"]) if c else 0 for c in cs], [(c["hi"] - c["mean"]) if c else 0 for c in cs]]
            ax.bar(xs, ys, color=["C2" if m in ("B5", "B7", "B9") else "C1" for m in methods])
            ax.errorbar(xs, ys, yerr=err, fmt="none", ecolor="black", capsize=3, lw=1)
            ax.set_xticks(list(xs), methods, fontsize=8)
            ax.set_ylabel(label)
            if i == 0:
                ax.set_ylim(0, 1.05)
                ax.set_title(f"{suite} (n = {len(eps)})", fontsize=10)
    fig.suptitle(f"{next(iter(suites.values()))[0]['model']}: 95 % intervals (Wilson; bootstrap for KL)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--journal", action="append", required=True, help="SUITE=PATH of an audit journal (repeatable)")
    ap.add_argument("--title", default=None)
    ap.add_argument("--markdown", type=Path, required=True)
    ap.add_argument("--plot", type=Path, default=None)
    args = ap.parse_args(argv)
    suites = {}
    for spec in args.journal:
        suite, path = spec.split("=", 1)
        suites[suite] = read_journal(Path(path))
    model = next(iter(suites.values()))[0]["model"]
    lines = [f"# {args.title or model + ' beside the paper'}", "",
             "Written by `python -m unsee.impl.experiments.side_by_side " + " ".join(
                 f"--journal {s}" for s in args.journal) + " …` from the audit journals: every figure on unsee's "
             "side is those episodes'. The paper's figures are those its text states (arXiv 2609.04875, "
             "§Experiments, Llama-3.1-8B-Instruct, n = 80–100 per suite in Table 1, 30 in Tables 2–3); its tables "
             "are images, so a cell it does not state in words is –.", ""]
    for suite, (header, eps) in suites.items():
        lines += suite_markdown(suite, header, eps)
    args.markdown.write_text("\n".join(lines))
    if args.plot is not None:
        plot(suites, args.plot)


if __name__ == "__main__":
    main()
