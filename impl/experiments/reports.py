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
    t = Tab("Paired tests against B5", ("method", "McNemar any-leak p", "Wilcoxon KL p", "TOST (B7)"))
    for m, x in doc["tests"].items():
        tost = "" if "tost_kl" not in x else (f"equivalent={x['tost_kl']['equivalent']} (margin "
                                             f"{x['tost_kl']['margin']} nats, p={fmt(x['tost_kl']['p'])})")
        t.add(m, x["mcnemar_any_leak_p"], x["wilcoxon_kl_p"], tost)
    tabs.append(t)
    return tabs


def audit_floor_line(doc: dict) -> str:
    flags = doc.get("floor_flags", [])
    line = f"Floor (B5) non-zero: {', '.join(flags) if flags else 'none'}"
    if doc.get("invalid_cases"):
        line += f"; episodes without a valid needle: {len(doc['invalid_cases'])}"
    return line


def audit_markdown(doc: dict) -> str:
    parts = [f"# unsee audit: {doc['suite']}, n={doc['n']}, model {doc['model']}", ""]
    for tab in audit_tabs(doc):
        parts.append(markdown(tab))
        if tab.title == "Leak per probe":
            parts += [audit_floor_line(doc), ""]
    return "\n".join(parts)
