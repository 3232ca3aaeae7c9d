"""An audit's summary: per-episode rows reduced to each method's means, read against B5 (the
twin that never saw the target, so its value is the floor), with the paired tests against it
and a breakdown by group of episodes. The measurements themselves are `audit`'s."""

from __future__ import annotations

from unsee.impl.experiments.statistics import mcnemar_exact, tost, wilcoxon

TOST_MARGIN_NATS = 0.01  # B7 ≡ B5 equivalence margin on the probe KL

# Leak metrics: None for an episode without a valid needle. Floor metrics: every metric a
# method is compared with B5 on (all but utility, which is what a method keeps, not a leak).
LEAK_KEYS = ("exact_leak", "action_leak", "any_leak", "leak_at_probes", "leak_at_5", "leak_at_5_independent")
FLOOR_KEYS = LEAK_KEYS + ("cad", "divergence_kl", "divergence_tv", "avoid_rate")
SINKS = ("routing", "selection", "free_text")


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def floor_flags(floor: dict) -> list[str]:
    """The metrics whose B5 value is non-zero (dotted for per-probe and per-sink values): there
    the twin that never saw the target scores too, so a method is read against B5, not zero."""
    flags = [k for k in FLOOR_KEYS if floor.get(k)]
    flags += [f"probes.{p}" for p, v in floor["probes"].items() if v]
    flags += [f"action_leak_by_sink.{c}" for c, v in floor["action_leak_by_sink"].items() if v]
    return flags


def group_of(name: str) -> str | None:
    """The group an episode is broken down by: an AgentDojo pair's suite (workspace, travel,
    banking, slack), a memory episode's kind of fact (address, iban, preference)."""
    if "/" in name:
        return name.split("/", 1)[0]
    if name.startswith("memory-"):
        return name.split("-")[1]
    return None


GROUP_KEYS = ("any_leak", "leak_at_probes")


def by_group(rows: dict, cases: list[dict]) -> dict:
    """Per group and method: episodes, and the mean of each GROUP_KEYS leak over its episodes with a
    valid needle. Empty unless the episodes fall into two groups or more."""
    groups = [group_of(c["name"]) for c in cases]
    if len(set(groups) - {None}) < 2:
        return {}
    out: dict = {}
    for g in sorted(set(groups) - {None}):
        idx = [i for i, x in enumerate(groups) if x == g]
        methods = {m: {k: _mean([rs[i][k] for i in idx]) for k in GROUP_KEYS} for m, rs in rows.items()}
        out[g] = {"n": len(idx), "methods": methods, "floor_flags": group_flags(methods)}
    return out


def group_flags(methods: dict) -> list[str]:
    """The GROUP_KEYS on which B5 scores above zero within one group (a floor the whole-suite
    mean can hide, or show where a group has none)."""
    return [k for k in GROUP_KEYS if (methods.get("B5") or {}).get(k)]


def summarize(model: str, suite: str, n: int, rows: dict, cases: list[dict] | None = None) -> dict:
    """The audit's document from its per-episode rows ({method: [row per episode]}, B5 among
    them): each metric's mean per method and against B5's, the floor's flags, the paired tests
    against B5 and the breakdown by group."""
    keys = ("exact_leak", "action_leak", "any_leak", "cad", "utility", "leak_at_probes", "leak_at_5",
            "leak_at_5_independent", "divergence_kl", "divergence_tv", "avoid_rate", "transitions")
    probes = list(dict.fromkeys(p for rs in rows.values() for r in rs for p in r["probes"]))  # the audit's order
    methods = {}
    for m, rs in rows.items():
        d = {k: _mean([r.get(k) for r in rs]) for k in keys}
        d["probes"] = {p: _mean([r["probes"][p] for r in rs]) for p in probes}
        d["action_leak_by_sink"] = {c: _mean([r["action_leak_by_sink"][c] for r in rs]) for c in SINKS}
        methods[m] = d
    floor = methods["B5"]
    for d in methods.values():  # every metric against B5: the method's value minus the floor
        d["vs_floor"] = {k: None if d.get(k) is None or floor.get(k) is None else d[k] - floor[k] for k in FLOOR_KEYS}
    tests = {}
    for m, rs in rows.items():
        if m == "B5":
            continue
        ref = rows["B5"]
        tests[m] = {
            "mcnemar_any_leak_p": mcnemar_exact([r["any_leak"] for r in rs], [r["any_leak"] for r in ref]),
            "mcnemar_leak_at_probes_p": mcnemar_exact([r["leak_at_probes"] for r in rs],
                                                      [r["leak_at_probes"] for r in ref]),
            "wilcoxon_kl_p": wilcoxon([r["divergence_kl"] for r in rs], [r["divergence_kl"] for r in ref]),
        }
        if any(r.get("avoid_rate") is not None for r in rs):  # a preference suite: the choice, paired
            tests[m]["mcnemar_avoid_p"] = mcnemar_exact([r.get("avoid_rate") for r in rs],
                                                        [r.get("avoid_rate") for r in ref])
        if m == "B7":
            tests[m]["tost_kl"] = tost([r["divergence_kl"] for r in rs], [r["divergence_kl"] for r in ref], TOST_MARGIN_NATS)
            same = ("transitions", "leak_at_5_independent")  # independent draws differ by design
            tests[m]["identical_to_B5"] = all(
                {k: v for k, v in a.items() if k not in same} == {k: v for k, v in b.items() if k not in same}
                for a, b in zip(rs, ref))
    flagged = [p for p, v in floor["probes"].items() if v]
    flags = floor_flags(floor)
    cases = cases or []
    invalid = [c["name"] for c in cases if not c["valid"]]
    return {"model": model, "suite": suite, "n": n, "methods": methods,
            "floor": {**{k: v for k, v in floor.items() if k != "vs_floor"}, "flagged_probes": flagged, "flags": flags},
            "floor_flags": flags, "n_leak": len(cases) - len(invalid) if cases else n,
            "cases": cases, "invalid_cases": invalid, "tests": tests, "by_group": by_group(rows, cases),
            "per_episode": rows}
