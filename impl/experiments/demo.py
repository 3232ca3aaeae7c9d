"""`unsee demo`: a user reveals a home address, the agent folds it into a tool call and a
summary, the user revokes it. Deleting the memory record (B1) leaves it behind; selective
replay (B7) forgets it, and the result is checked bit for bit against a full reset (B5)."""

from __future__ import annotations

import time

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from unsee.impl.engine.kv_runtime import KVRuntime
from unsee.model.receipt import receipt_json
from unsee.impl.store.show import compensation_text
from unsee.impl.experiments.audit import divergence
from unsee.impl.experiments.baselines import memory_delete
from unsee.impl.engine.exact import PROBES, compare
from unsee.model.state import Config, Observation, Part
from unsee.model.tools import SHIP_GIFT

TARGET = "addr"
NEEDLES = ("Wallaby", "42")
EPISODE = (
    Observation("system", (Part("sys", "You are a helpful shopping assistant. Keep answers short."),)),
    Observation("user", (Part("u1", "Hi! I want to order a birthday gift for my sister."),), reply=16),
    Observation("user", (Part("u2", "She loves hiking and old maps. Any ideas?"),), reply=24),
    Observation("tool", (Part("shop", "Catalog: vintage trail map 35 EUR; brass compass 22 EUR; "
                                      "hiking guide 18 EUR."),), reply=16),
    Observation("user", (Part("u3", "The vintage map sounds perfect. Add it to the cart."),), reply=16),
    Observation("memory", (Part(TARGET, "The user's home address is 42 Wallaby Way, Sydney."),)),
    Observation("user", (Part("u4", "Please ship the gift to my home address."),), reply=16, tool="ship_gift"),
    Observation("tool", (Part("order", "Order 1182 created. Delivery in 3 days."),), reply=8),
    Observation("user", (Part("u5", "Great. Please summarize this conversation."),), reply=8, compact=True),
    Observation("user", (Part("u6", "Thanks, that is all for today."),), reply=8),
)
TAU = 1 + next(i for i, o in enumerate(EPISODE) if TARGET in o.sources)  # the address enters here
CONFIG = Config(summary_tokens=24, tools=(SHIP_GIFT,))


def layers_text(rt) -> dict[str, str]:
    """The human-readable content of each layer of the live state."""
    s, tmpl = rt.session.state, rt.model.template
    return {
        "observation log": " | ".join(p.text for o in rt.session.observations for p in o.parts),
        "context (KV)": tmpl.detokenize(s.tokens),
        "memory": " | ".join(tmpl.unwrap("memory", t) for _, t in s.memory),
        "summary": tmpl.detokenize(s.summary or ()),
        "tool calls (ledger)": " | ".join(f"{e.tool}({e.args})" for e in s.ledger),
        "pending plan": " | ".join(f"{c.tool}({c.args})" for c in s.plan),
    }


def excerpt(text: str, word: str, width: int = 200) -> str:
    """At most `width` characters of `text`, around the first `word` where it holds one."""
    at = text.find(word)
    if len(text) <= width:
        return text
    start = 0 if at < 0 else min(max(0, at - width // 2), len(text) - width)
    return ("…" if start else "") + text[start:start + width] + ("…" if start + width < len(text) else "")


def run_demo(model: str = "smollm2", console: Console | None = None) -> dict:
    con = console or Console()
    con.rule("[bold]unsee demo[/bold]")
    with con.status(f"loading {model} (offline)…"):
        t0 = time.perf_counter()
        live = KVRuntime(model, CONFIG)
    con.print(f"loaded {model} in {time.perf_counter() - t0:.1f}s")

    with con.status(f"running the session: {len(EPISODE)} observations"):
        for i, obs in enumerate(EPISODE, 1):
            live.step(obs)
            con.print(f"  t={i} {obs.kind:<6} {obs.parts[0].text!r}")
    con.print("\n[bold]What the agent derived from the address[/bold]")
    for name, text in layers_text(live).items():
        if name != "context (KV)":
            con.print(f"  {name}: {escape(repr(excerpt(text.strip(), 'Wallaby')))}", soft_wrap=True)

    with con.status("branching B1 (memory delete), B7 (selective replay) and B5 (full reset)"):
        b1, b7, b5 = live.branch(), live.branch(), live.branch()  # paired: the same contaminated state
        memory_delete(b1, [TARGET])
        receipt = b7.forget([TARGET], method="B7")
        full = b5.forget([TARGET], method="B5")

    table = Table(title="Where the address survives (string search for 'Wallaby')")
    table.add_column("layer")
    for col in ("B0 no forget", "B1 memory delete", "B7 selective replay", "B5 full reset"):
        table.add_column(col, justify="center")
    texts = [layers_text(rt) for rt in (live, b1, b7, b5)]
    for layer in texts[0]:
        table.add_row(layer, *("[red]yes[/red]" if "Wallaby" in t[layer] else "no" for t in texts))
    con.print(table)

    eq1, eq7 = compare(b1, b5), compare(b7, b5)
    t2 = Table(title="Equal to the full reset B5? (K/V and probe logits under torch.equal)")
    t2.add_column("layer")
    t2.add_column("B1", justify="center")
    t2.add_column("B7", justify="center")
    for k in eq7:
        t2.add_row(k, *("[green]equal[/green]" if e[k] else "[red]differs[/red]" for e in (eq1, eq7)))
    (kl1, _), (kl7, _) = divergence(b1, b5, PROBES), divergence(b7, b5, PROBES)
    t2.add_row("probe KL vs B5", f"{kl1:.4g}", f"{kl7:.4g}")
    con.print(t2)

    r = receipt_json(receipt)
    t3 = Table(title="B7 receipt")
    t3.add_column("field")
    t3.add_column("B7", justify="right")
    t3.add_column("B5", justify="right")
    f = receipt_json(full)
    for k in ("tau", "T", "checkpoint", "transitions", "tokens_prefilled", "tokens_decoded", "replies",
              "replies_skipped", "tokens_restored", "tokens_rematerialized", "seconds"):
        t3.add_row(k, str(r[k]), str(f[k]))
    con.print(t3)
    for c in r["compensation"]:
        con.print(f"[yellow]needs compensation {c['call_id']}: {escape(compensation_text(c))}[/yellow]", soft_wrap=True)
    con.print(f"B7 took {r['seconds']:.2f}s against B5's {f['seconds']:.2f}s "
              f"({f['seconds'] / max(r['seconds'], 1e-9):.1f}× faster): it brought R_{r['checkpoint']} back by "
              f"reading {r['tokens_restored']} context tokens' K/V pages (no compute; the compaction at t="
              f"{next(i for i, o in enumerate(EPISODE, 1) if o.compact)} had replaced the resident cache) and "
              f"replayed only the {r['transitions']} transitions from τ={r['tau']}, decoding {r['tokens_decoded']} "
              f"tokens where B5 re-ran all {f['transitions']} and decoded {f['tokens_decoded']}: "
              f"{r['replies_skipped']} of its {r['replies']} replies were unchanged by the address and accepted "
              "after one check, exactly as decoding them would have given.")
    exact = all(eq7.values())
    optimal = r["transitions"] == r["T"] - r["tau"] + 1
    con.print(f"\n[bold]{'B7 is bit-exact against a full reset' if exact else 'B7 DIFFERS from the full reset'}"
              f"[/bold], with {r['transitions']} = T−τ+1 = {r['T']}−{r['tau']}+1 transitions "
              f"instead of {f['transitions']}." if optimal else "transition count is not T−τ+1")
    return {"exact": exact, "optimal": optimal, "b1_equal_b5": all(eq1.values()), "receipt": r,
            "kl_b1": kl1, "kl_b7": kl7}
