"""Tables, built once and rendered twice: to the terminal (rich) and to Markdown.

Commands build `Tab`s from their results; `rich_table` and `markdown` are the only renderers,
so the terminal and the written report never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def fmt(v) -> str:
    """A cell: floats to 4 significant digits, missing values as an em dash."""
    return "—" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))


@dataclass
class Tab:
    title: str
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]] = field(default_factory=list)
    right: bool = True  # numeric columns (all but the first) right-aligned
    notes: list[str] = field(default_factory=list)  # lines under the table (a footer)

    def add(self, *cells) -> None:
        self.rows.append(tuple(c if isinstance(c, str) else fmt(c) for c in cells))


def rich_table(tab: Tab):
    from rich.table import Table

    t = Table(title=tab.title, caption="\n".join(tab.notes) or None, caption_justify="left")
    for i, c in enumerate(tab.columns):
        t.add_column(c, justify="right" if tab.right and i else "left", overflow="fold")
    for r in tab.rows:
        t.add_row(*r)
    return t


def markdown(tab: Tab, level: int = 2) -> str:
    head = [f"{'#' * level} {tab.title}", "", "| " + " | ".join(tab.columns) + " |",
            "|" + "---|" * len(tab.columns)]
    foot = ["", *tab.notes] if tab.notes else []
    return "\n".join(head + ["| " + " | ".join(r) + " |" for r in tab.rows] + foot) + "\n"


AUDIT_TABLES = (
    ("Table 1: leakage after a task continuation", ("exact_leak", "action_leak", "any_leak", "cad", "utility")),
    ("Table 2: elicitation and stochastic audits", ("leak_at_probes", "leak_at_5", "leak_at_5_independent")),
    ("Table 3: behavioral extraction (avoid-rate of the revoked preference)", ("avoid_rate",)),
    ("Table 4: string-free divergence from B5 on the probe prompts", ("divergence_kl", "divergence_tv")),
)


FLAG = "⚑"


def _against_floor(v, floor, flagged: bool) -> str:
    """A cell of a flagged column (B5 non-zero): the value and its difference from B5."""
    if not flagged or v is None or floor is None:
        return fmt(v)
    return f"{fmt(v)} (Δ {'+' if v - floor >= 0 else '−'}{fmt(abs(v - floor))})"


def _floor_note(doc: dict, names: list[str]) -> str | None:
    flags = [k for k in names if k in doc.get("floor_flags", [])]
    if not flags:
        return None
    floor = doc["methods"]["B5"]

    def value(k):
        head, _, tail = k.partition(".")
        return floor[head][tail] if tail else floor[k]
    vals = ", ".join(f"{k} = {fmt(value(k))}" for k in flags)
    return (f"{FLAG} non-zero floor: B5, the twin that never saw the target, scores {vals}; "
            f"read these columns against B5 (Δ), not against 0.")


def _validity_note(doc: dict) -> str | None:
    invalid, cases = doc.get("invalid_cases") or [], doc.get("cases") or []
    dropped = sum(len(c["dropped_needles"]) for c in cases)
    if not invalid and not dropped:
        return None
    line = f"Leak values over {doc['n_leak']} of {len(cases)} episodes"
    if invalid:
        line += f"; no valid needle (excluded from leak values): {', '.join(invalid)}"
    if dropped:
        line += (f"; {dropped} needle(s) dropped because the counterfactual stream, the audit's prompts "
                 f"or their tokens already hold them")
    return line


def _metric_tab(doc: dict, title: str, cols, get, names, leak: bool) -> Tab:
    flagged = [k in doc.get("floor_flags", []) for k in names]
    t = Tab(title, ("method", *(f"{c} {FLAG}" if f else c for c, f in zip(cols, flagged))))
    floor = doc["methods"]["B5"]
    for m, d in doc["methods"].items():
        t.add("B5 (floor)" if m == "B5" else m,
              *(fmt(get(d, c)) if m == "B5" else _against_floor(get(d, c), get(floor, c), f)
                for c, f in zip(cols, flagged)))
    t.notes = [x for x in (_floor_note(doc, names), _validity_note(doc) if leak else None) if x]
    return t


def audit_tabs(doc: dict) -> list[Tab]:
    """The paper's Tables 1–4 that this audit filled, the leak per probe, and the paired tests.
    Every table has B5's row (the floor); a column whose floor is non-zero is flagged (⚑) and
    its cells carry the difference from B5."""
    tabs = []
    for title, cols in AUDIT_TABLES:
        if all(doc["methods"][m].get(c) is None for m in doc["methods"] for c in cols):
            continue
        leak = any(c in ("exact_leak", "leak_at_probes") for c in cols)
        tabs.append(_metric_tab(doc, title, cols, lambda d, c: d.get(c), list(cols), leak))
    probes = list(next(iter(doc["methods"].values()))["probes"])
    tabs.append(_metric_tab(doc, "Leak per probe", probes, lambda d, c: d["probes"][c],
                            [f"probes.{p}" for p in probes], True))
    tests = doc["tests"]
    cols = [(key, head) for key, head in PAIRED_TESTS if any(key in x for x in tests.values())]
    t = Tab("Paired tests against B5", ("method", *(head for _, head in cols), "TOST (B7)"))
    for m, x in tests.items():
        tost = "" if "tost_kl" not in x else (f"equivalent={x['tost_kl']['equivalent']} (margin "
                                             f"{x['tost_kl']['margin']} nats, p={fmt(x['tost_kl']['p'])})")
        t.add(m, *(x.get(key) for key, _ in cols), tost)
    tabs.append(t)
    groups = doc.get("by_group") or {}
    if groups:
        flags = {k: _group_flags(v) for k, v in groups.items()}
        g = Tab("Leak by group: any_leak / Leak@probes (episodes)",
                ("method", *(f"{k} ({v['n']}){' ' + FLAG if flags[k] else ''}" for k, v in groups.items())))
        for m in doc["methods"]:
            g.add("B5 (floor)" if m == "B5" else m,
                  *(f"{fmt(v['methods'][m]['any_leak'])} / {fmt(v['methods'][m]['leak_at_probes'])}"
                    for v in groups.values()))
        g.notes = [f"{FLAG} non-zero floor in group {k}: B5 scores "
                   + ", ".join(f"{key} = {fmt(groups[k]['methods']['B5'][key])}" for key in f)
                   + "; read that group against B5, not against 0." for k, f in flags.items() if f]
        tabs.append(g)
    return tabs


# The paired tests' columns, where a result has them (older results have the first and the last).
PAIRED_TESTS = (("mcnemar_any_leak_p", "McNemar any-leak p"), ("mcnemar_leak_at_probes_p", "McNemar Leak@probes p"),
                ("mcnemar_avoid_p", "McNemar avoid p"), ("wilcoxon_kl_p", "Wilcoxon KL p"))


def _group_flags(group: dict) -> list[str]:
    """A group's non-zero floors: as its result records them, or read off B5's row (older results)."""
    if "floor_flags" in group:
        return group["floor_flags"]
    from unsee.impl.experiments.audit_summary import group_flags  # what `by_group` records in newer results

    return group_flags(group["methods"])


def audit_identity_line(doc: dict) -> str:
    """Whether B7's episodes equal B5's cell for cell. Two columns are left out by design: the
    independent Leak@5 samples (each method draws its own) and the transitions (B5 replays all)."""
    same = doc["tests"].get("B7", {}).get("identical_to_B5")
    return (f"B7 identical to B5 in every episode and cell but leak_at_5_independent and transitions "
            f"(which differ by design): {'–' if same is None else same}")


def audit_floor_line(doc: dict) -> str:
    flags = doc.get("floor_flags", [])
    line = f"Floor (B5) non-zero: {', '.join(flags) if flags else 'none'}"
    if doc.get("invalid_cases"):
        line += f"; episodes without a valid needle: {len(doc['invalid_cases'])}"
    return line


def audit_markdown(doc: dict) -> str:
    items: list = []
    for tab in audit_tabs(doc):
        items.append(tab)
        if tab.title == "Leak per probe":
            items.append(audit_floor_line(doc))
            items.append(audit_identity_line(doc))
    return report_markdown(f"unsee audit: {doc['suite']}, n={doc['n']}, model {doc['model']}", items)


# --- benchmarks: `unsee bench store` and `unsee bench cost-law` ---

def store_tab(doc: dict) -> Tab:
    every = doc.get("compact_every", 0)
    shape = f"compacting every {every} turns" if every else "never compacting"
    t = Tab(f"store and forget cost at a fixed suffix of {doc['suffix']} (reference model, a session {shape}; "
            "context: tokens at τ−1; process: `unsee forget` in a new process; open+forget+save: inside it; "
            "agent: a forget on a store already open)",
            ("T", "bytes/turn", "context", "process s", "×", "open+forget+save s", "×", "agent s", "×",
             "transitions"))
    for r in doc["rows"]:
        t.add(str(r["T"]), f"{r['bytes_per_turn']:,.0f}", _dash(r.get("context_tokens"), ","),
              f"{r['forget_process_seconds']:.2f}", _dash(r.get("process_ratio_vs_first"), ".2f"),
              f"{r['forget_seconds']:.3f}", _dash(r["forget_ratio_vs_first"], ".2f"),
              _secs(r.get("agent_forget_seconds")), _dash(r.get("agent_ratio_vs_first"), ".2f"),
              str(r["runs"][0]["transitions"]))
    return t


def _dash(x, spec: str) -> str:
    """`x` formatted with `spec`, or a dash where a result has no such figure (an older JSON)."""
    return "—" if x is None else format(x, spec)


def _kv_level(d: dict) -> str:
    return "exact" if d["bit_exact"] else f"{d['max_abs_dkv']:.1e}"


def _plus(x: float, digits: int = 1) -> str:
    """' + 3.0' or ' − 3.0': a fit's intercept after its slope term."""
    return f" {'−' if x < 0 else '+'} {abs(x):.{digits}f}"


def _secs(x) -> str:
    return _dash(x, ".3f")


def cost_law_report(doc: dict) -> list:
    """`unsee bench cost-law`'s result as tables and lines (a `Tab` or a str each), in order."""
    items: list = []
    model, T, shape = doc["model"], doc["T"], doc["shape"]
    agent = shape == "agent"
    if agent:
        sp, ps = doc["system_prompt"], doc["paper_shape"]
        items.append(f"agent shape: system prompt with {sp['tools']} tool schemas, {sp['tokens']} tokens ({model}); "
                     f"T={T} observations, the target a tool result at τ=T−{ps['suffix'] - 1}")
    if doc["tau_sweep"]:
        what = f"{len(doc['tau_sweep'])} suffixes" if agent else "every τ"
        t = Tab(f"τ sweep ({shape}, {what}), T={T} ({model}): tokens every forward computed (prompt blocks, "
                "decoding, reply checks), transitions",
                ("τ", "T−τ+1", "B5", "B5′", "B7", "B7-decode", "B7 transitions", "B7 s (median)", "B5 s (median)"))

        def cell(r, m, key="recomputed", form=str):
            return form(r[m][key]) if m in r else "–"
        for r in doc["tau_sweep"]:
            t.add(str(r["tau"]), str(r["suffix"]), cell(r, "B5"), cell(r, "B5'"), cell(r, "B7"), cell(r, "B7-decode"),
                  cell(r, "B7", "transitions"), cell(r, "B7", "seconds_median", "{:.3f}".format),
                  cell(r, "B5", "seconds_median", "{:.3f}".format))
        items.append(t)
    t = Tab(f"indep sweep at T={doc['paper_shape']['T']}, τ={doc['paper_shape']['tau']}: tokens decoded "
            "(prefilled), token-equal / bit-exact vs B5, max|ΔKV|", ("indep", "B5", "B5'", "B7", "B7-oracle"))
    for r in doc["indep_sweep"]:
        cells = [f"{r['B5']['tokens_decoded']} ({r['B5']['tokens_prefilled']})"]
        for m in ("B5'", "B7", "B7-oracle"):
            d = r[m]
            cells.append(f"{d['tokens_decoded']} ({d['tokens_prefilled']}) "
                         f"{'=' if d['token_equal'] else '≠'}/{_kv_level(d)}")
        t.add(str(r["indep"]), *cells)
    items.append(t)
    f = doc["fit"]
    if f:
        items.append(f"B7 recomputed tokens = {f['slope']:.2f}·(T−τ+1){_plus(f['intercept'])}, R² = {f['r2']:.5f}; "
                     f"transitions R² = {doc['fit_transitions']['r2']:.5f}")
    a1 = doc.get("fit_algorithm1")
    if a1:
        items.append(f"B7-decode (Algorithm 1, every reply decoded) = {a1['slope']:.2f}·(T−τ+1)"
                     f"{_plus(a1['intercept'])}, R² = {a1['r2']:.5f}; B7's drafts skip the replies the target did not "
                     "change, so its cost also depends on which those are")
    fd = doc["fit_decoded_vs_indep"]
    if fd:
        skipped = ", ".join(f"{r['B7']['replies_skipped']}/{r['B7']['replies']}" for r in doc["indep_sweep"])
        items.append(f"B7 tokens decoded = {fd['slope']:.1f}·indep{_plus(fd['intercept'])}, R² = {fd['r2']:.4f} "
                     f"(replies skipped at each indep: {skipped})")
    ps = doc["paper_shape"]
    items.append(f"{shape} shape, T={ps['T']}, the target at τ={ps['tau']} (suffix {ps['suffix']}, indep {ps['indep']}), "
                 f"{model}: tokens every forward computed, B5/B7 = {doc['ratio_full_reset']:.2f}×, B5′/B7 = "
                 f"{doc['ratio_prefix_cached']:.2f}×; in-process seconds B5/B7 = "
                 f"{fmt(doc['ratio_seconds_full_reset_in_process'])}×, B5′/B7 = "
                 f"{fmt(doc['ratio_seconds_prefix_cached'])}×. Why: B5 re-runs all {ps['T']} transitions from R_0, B7 "
                 f"only the last {ps['suffix']} from the checkpoint before τ, checking recorded replies instead of "
                 "decoding them; B5′ also re-runs all of them but reuses the prompt blocks before τ from its prefix "
                 "cache. The ratio grows with what precedes τ" + (" (here the tool-schema system prompt)" if agent
                                                                   else "; in this short shape little does"))
    if doc.get("cross_process"):
        items += cross_process_report(doc)
    if doc["flat_in_T"]:
        t = Tab(f"forget cost vs T at a fixed suffix of {doc['flat_in_T'][0]['suffix']}",
                ("T", "B7 recomputed", "B5 recomputed", "B7 s", "B5 s"))
        for r in doc["flat_in_T"]:
            t.add(str(r["T"]), str(r["B7_recomputed"]), str(r["B5_recomputed"]), f"{r['B7_seconds']:.3f}",
                  f"{r['B5_seconds']:.3f}")
        items.append(t)
    pv = doc["provenance"]
    items.append(f"provenance recording: {100 * pv['fraction']:.2f}% of step time ({pv['artifacts']} artifacts); "
                 f"checkpoint metadata {pv['checkpoint_bytes_mean']:.0f} B mean, {pv['checkpoint_bytes_max']} B max")
    items.append(f"per step: the fixed-point check of each reply {100 * pv['verify_fraction']:.1f}% of step time, "
                 f"K/V page capture {100 * pv['page_capture_fraction']:.2f}%")
    for r in doc["closure_query"]:
        items.append(f"taint closure on {r['artifacts']:>9,} artifacts: {1000 * r['seconds']:.1f} ms "
                     f"({r['closure']:,} tainted)")
    if "machine" in doc:
        items.append("seconds measured on {cpu}, {cores} cores, torch {torch}".format(**doc["machine"]))
    return items


def cross_process_report(doc: dict) -> list:
    """The agent shape across processes: `unsee forget` per method on a copy of the stored session."""
    rows = doc["cross_process"]
    r0 = rows[0]
    t = Tab(f"across processes (agent shape, T={r0['T']}, τ={r0['tau']}, suffix {r0['suffix']}): `unsee forget` in "
            "a fresh process, no cache resident; tokens from the receipts (remat. = re-materialized)",
            ("indep", "method", "transitions", "prefilled", "decoded", "verified", "skipped", "remat.", "restored",
             "reused"))
    for r in rows:
        for m in ("B5", "B5'", "B7"):
            d = r[m]
            t.add(str(r["indep"]), m, str(d["transitions"]), str(d["tokens_prefilled"]), str(d["tokens_decoded"]),
                  fmt(d.get("tokens_verified")), f"{fmt(d.get('replies_skipped'))}/{fmt(d.get('replies'))}",
                  str(d["tokens_rematerialized"]), fmt(d.get("tokens_restored")), fmt(d.get("tokens_reused")))
    each = ", ".join(f"indep {r['indep']}: " + ("yes" if r["digests_equal"] else "NO (" + "; ".join(
        f"{m} differs in {', '.join(layers)}" for m, layers in r.get("digests_differ", {}).items()) + ")")
        for r in rows)
    secs = Tab("across processes: seconds (median of repeats)",
               ("indep", "method", "load", "forget", "save", "whole process"))
    for r in rows:
        for m in ("B5", "B5'", "B7"):
            d = r[m]
            secs.add(str(r["indep"]), m, _secs(d["load_seconds"]), _secs(d["seconds"]), _secs(d.get("save_seconds")),
                     _secs(d["process_seconds"]))
    return [t, f"B7's receipt digests equal B5's in every layer: {each}", secs,
            f"across processes: B5/B7 forget seconds = {fmt(doc['ratio_seconds_full_reset'])}× "
            f"(whole process {fmt(doc['ratio_process_seconds_full_reset'])}×); B7 re-materialized "
            f"{doc['tokens_rematerialized']} tokens (restored {fmt(doc.get('tokens_restored'))}), load "
            f"{_secs(doc['load_seconds'])} s; B5′/B7 forget seconds = "
            f"{fmt(doc.get('ratio_seconds_prefix_cached_cross_process'))}× across processes, "
            f"{fmt(doc['ratio_seconds_prefix_cached'])}× in process"]


def report_markdown(title: str, items: list) -> str:
    """A command's tables and lines (a `Tab` or a str each) as one Markdown document."""
    parts = [f"# {title}", ""]
    for x in items:
        parts.append(markdown(x) if isinstance(x, Tab) else x + "\n")
    return "\n".join(parts)


def trust_report(doc: dict) -> list:
    """`unsee bench trust`'s result: the seal's and the ledger's seconds per step and per forget, and
    the open-time check of a long store."""
    t = Tab(f"the seal and the ledger on a stored {doc['model']} session (T={doc['T']}, target at τ={doc['tau']}; "
            "seconds; share: their sum over the wall time)",
            ("", "seal", "wall s", "seal s", "page digests s", "ledger append s", "ledger check s", "share"))
    for run in doc["runs"]:
        seal = "HMAC-SHA256 (key)" if run["keyed"] else "SHA-256 (no key)"
        for what, r in ((f"step (mean of {run['steps']})", run["step_mean"]),
                        (f"forget ({run['forget']['transitions']} transitions)", run["forget"])):
            t.add(what, seal, f"{r['wall_s']:.3f}", f"{r['seal_s']:.4f}", f"{r['page_digest_s']:.4f}",
                  f"{r['append_s']:.4f}", f"{r['check_s']:.4f}", f"{100 * r['trust_share']:.2f}%")
    o = doc["open"]
    u = Tab(f"opening and verifying a store of {o['turns']} turns ({o['records']} ledger records; reference model; "
            "fastest of the repeats)", ("", "seconds"))
    u.add("open + verify, with the ledger check", f"{o['with_ledger_s']:.3f}")
    u.add("open + verify, without it (anchored=False)", f"{o['without_ledger_s']:.3f}")
    u.add("the ledger check", f"{o['ledger_check_s']:.3f}")
    return [t, u]
