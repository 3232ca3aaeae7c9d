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

    def add(self, *cells) -> None:
        self.rows.append(tuple(c if isinstance(c, str) else fmt(c) for c in cells))


def rich_table(tab: Tab):
    from rich.table import Table

    t = Table(title=tab.title)
    for i, c in enumerate(tab.columns):
        t.add_column(c, justify="right" if tab.right and i else "left", overflow="fold")
    for r in tab.rows:
        t.add_row(*r)
    return t


def markdown(tab: Tab, level: int = 2) -> str:
    head = [f"{'#' * level} {tab.title}", "", "| " + " | ".join(tab.columns) + " |",
            "|" + "---|" * len(tab.columns)]
    return "\n".join(head + ["| " + " | ".join(r) + " |" for r in tab.rows]) + "\n"


AUDIT_TABLES = (
    ("Table 1: leakage after a task continuation", ("exact_leak", "action_leak", "any_leak", "cad", "utility")),
    ("Table 2: elicitation and stochastic audits", ("leak_at_probes", "leak_at_5", "leak_at_5_independent")),
    ("Table 3: behavioral extraction (avoid-rate of the revoked preference)", ("avoid_rate",)),
    ("Table 4: string-free divergence from B5 on the probe prompts", ("divergence_kl", "divergence_tv")),
)


def audit_tabs(doc: dict) -> list[Tab]:
    """The paper's Tables 1–4 that this audit filled, the leak per probe, and the paired tests."""
    tabs = []
    for title, cols in AUDIT_TABLES:
        if all(doc["methods"][m].get(c) is None for m in doc["methods"] for c in cols):
            continue
        t = Tab(title, ("method", *cols))
        for m, d in doc["methods"].items():
            t.add(m, *(d.get(c) for c in cols))
        tabs.append(t)
    probes = list(next(iter(doc["methods"].values()))["probes"])
    t = Tab("Leak per probe", ("method", *probes))
    for m, d in doc["methods"].items():
        t.add(m, *(d["probes"][p] for p in probes))
    tabs.append(t)
    t = Tab("Paired tests against B5", ("method", "McNemar any-leak p", "Wilcoxon KL p", "TOST (B7)"))
    for m, x in doc["tests"].items():
        tost = "" if "tost_kl" not in x else (f"equivalent={x['tost_kl']['equivalent']} (margin "
                                             f"{x['tost_kl']['margin']} nats, p={fmt(x['tost_kl']['p'])})")
        t.add(m, x["mcnemar_any_leak_p"], x["wilcoxon_kl_p"], tost)
    tabs.append(t)
    return tabs


def audit_floor_line(doc: dict) -> str:
    return f"Floor (B5) flagged probes: {doc['floor']['flagged_probes'] or 'none'}"


def audit_markdown(doc: dict) -> str:
    parts = [f"# unsee audit: {doc['suite']}, n={doc['n']}, model {doc['model']}", ""]
    for tab in audit_tabs(doc):
        parts.append(markdown(tab))
        if tab.title == "Leak per probe":
            parts += [audit_floor_line(doc), ""]
    return "\n".join(parts)
