"""A stored session as a person reads it, and its provenance graph as a picture.

`session_view` decodes every turn: the observation's parts with their source ids, the replies the
model decoded, tool calls and the results the agent read back, memory records, the summary a
compaction wrote, pending tool calls, the side effects the state's ledger records and those that
went out (after a forget they can differ: a replay fires nothing, so what went out stays, and the
difference is a compensation), and the receipts of earlier forgets. `draw_graph` draws G_T with one
column per turn; given a source, it marks the artifacts that carried it, its taint closure I(z), the
first entry τ and the checkpoint a forget would restore (Algorithm 1, lines 1–4, computed by
`unsee.model`).
"""

from __future__ import annotations

import json
from pathlib import Path

from unsee.model.plan import arguments, replay_tools


def decoder_for(store):
    """token ids → text, with the stored model's own template (the reference has no text)."""
    from unsee.impl.store.digests import stored_settings

    model = store.model
    if model == "reference":
        return decoder_of(None)
    from unsee.impl.engine.models import load

    settings = stored_settings(store)
    return _template_decoder(load(model, dtype=settings["dtype"], device=settings.get("device"),
                                  attn=settings.get("attn", "eager")).template)


class Decoder:
    """Token ids → text: `text` for what the model read and wrote, `call` for a tool call's
    constrained reply (its JSON arguments)."""

    def __init__(self, text, call, block=None) -> None:
        self.text, self.call = text, call
        self.block = block or (lambda kind, ids: text(ids))  # a prompt block's text, without its markup

    def __call__(self, ids) -> str:
        return self.text(ids)


def _template_decoder(template) -> Decoder:
    from unsee.impl.engine.grammar import json_text

    return Decoder(lambda ids: template.detokenize(list(ids)), lambda ids: json_text(template, ids),
                   template.unwrap)


def turn_view(t: int, o, prev, r, decode) -> dict:
    """Transition t decoded: o_t's parts and what F(R_{t-1}, o_t) produced in R_t."""
    made = [a for a in r.artifacts if a.turn == t]
    call = (1 if o.reply else 0) if o.tool and len(r.outputs) > bool(o.reply) else None  # the call's output
    ids = {a.id for a in made}
    return {
        "t": t, "kind": o.kind,
        "parts": [{"source": p.source, "text": p.text, **({"instead_of": p.instead_of} if p.instead_of else {})}
                  for p in o.parts],
        "replies": [decode(x) for i, x in enumerate(r.outputs) if i != call],
        "calls": [call_view(r.config, o.tool, r.outputs[call], decode)] if call is not None else [],
        "results": [decode.block("tool", r.tokens[b.start:b.end]) for b in r.blocks
                    if b.artifact in ids and b.artifact.endswith(".tool_result")],  # what a tool gave back
        "memory": [{"artifact": aid, "text": decode.block("memory", toks)} for aid, toks in r.memory if aid in ids],
        "summary": decode(r.summary) if r.summary is not None and r.summary != prev.summary else None,
        "pending_calls": [{"call_id": c.call_id, "tool": c.tool, "args": arguments(c.args)} for c in r.plan
                          if c not in prev.plan],
        "committed": [{"call_id": e.call_id, "tool": e.tool, "args": arguments(e.args)}
                      for e in r.ledger[len(prev.ledger):]],
        "artifacts": [{"id": a.id, "type": a.type, "sources": sorted(a.source_ids), "parents": list(a.parents)}
                      for a in made],
    }


def call_view(config, tool: str, out, decode) -> dict:
    """A tool call as decoded: its arguments' text, whether they are valid for the tool's schema
    (an invalid call fails without running), and whether they were cut at `call_tokens`."""
    text = decode.call(out)
    valid = config.tool(tool).arguments.validate(text) is not None
    return {"tool": tool, "arguments": text, "valid": valid, "tokens": len(out),
            "cut": not valid and len(out) >= config.call_tokens}


def decoder_of(template):
    """token ids → text with a loaded model's chat template (ids as t<id> for the reference, which has none)."""
    if template is None:
        from unsee.model.lm import REFERENCE

        return Decoder(lambda ids: " ".join(f"t{i}" for i in ids), REFERENCE.json_text)
    return _template_decoder(template)


def session_view(store, decode=None) -> dict:
    """Every turn of the stored (verified) session, decoded."""
    s = store.load(None)
    decode = decode or decoder_for(store)
    turns = [turn_view(t, o, s.states[t - 1], s.states[t], decode) for t, o in enumerate(s.observations, 1)]
    world = [{"call_id": e.call_id, "tool": e.tool, "args": arguments(e.args), "turn": e.turn} for e in s.world]
    for t, view in enumerate(turns, 1):  # what went out at t, beside what R_t's ledger records
        view["fired"] = [{k: e[k] for k in ("call_id", "tool", "args")} for e in world if e["turn"] == t]
        view["compensation"] = compensation_at(s, t)
    receipts = [{k: r.get(k) for k in ("method", "sources", "tau", "T", "checkpoint", "transitions",
                                       "compensation", "pages_recomputed")} for r in store.receipts()]
    return {"model": store.model, "policy": s.policy, "T": s.T,
            "checkpoints": [c.boundary for c in s.checkpoints], "turns": turns, "world": world, "receipts": receipts}


def compensation_at(s, t: int) -> list[dict]:
    """Where what went out at turn t and what R_T's ledger records for turn t differ (after a
    forget: a replay fires nothing), in a receipt's terms (`replay_tools`): each entry's `args`
    are the state's, `committed` what went out (None: never fired; `args` None: the state
    makes no such call)."""
    fired = tuple(e for e in s.world if e.turn == t)
    recorded = tuple(e for e in s.state.ledger if e.turn == t)
    _, differs = replay_tools(fired, recorded)
    ids = {e.call_id for e in recorded}
    return differs + [{"call_id": e.call_id, "tool": e.tool, "args": None, "committed": arguments(e.args),
                       "reason": "counterfactual makes no such call"} for e in fired if e.call_id not in ids]


def compensation_text(c: dict) -> str:
    """A compensation entry (a receipt's, or `session_view`'s) as the user reads it."""
    def call(args) -> str:
        return f"{c['tool']}({json.dumps(args, ensure_ascii=False)})"

    if c["committed"] is None:  # "not committed"
        return f"the state after the forget records {call(c['args'])}, which never went out; a replay fires nothing"
    if c["args"] is None:  # "counterfactual makes no such call"
        return f"{call(c['committed'])} went out; the state after the forget makes no such call"
    return (f"{call(c['committed'])} went out; the state after the forget records {call(c['args'])} instead, "
            "and a replay fires nothing")


def forget_plan(store, sources) -> dict:
    """What a forget of `sources` would touch: the carrying artifacts, τ, I(z) and the checkpoint."""
    from unsee.model.plan import plan_forget

    store.require_forgettable(sources)
    p = plan_forget(store.load(None), sources)
    return {"sources": list(sources), "carriers": sorted(p.carriers), "tau": p.tau, "T": p.T,
            "taint": sorted(p.taint), "checkpoint": p.boundary, "transitions": p.transitions}


COLORS = {"system": "#9aa5b1", "user": "#4c8bf5", "memory": "#f5a623", "tool": "#7ed321", "block": "#d0d7de",
          "reply": "#bd10e0", "plan": "#8b572a", "tool_call": "#6a5acd", "tool_result": "#417505",
          "summary": "#50e3c2", "memory_record": "#f8e71c"}


def draw_graph(store, path: Path, sources=(), title: str | None = None) -> dict:
    """Draw the stored provenance graph to `path` (.png or .svg): artifacts in one column per turn,
    edges parent → child, each labelled with its type (an observation field with its source id too).
    With `sources`: the carrying artifacts ringed red, I(z) filled red, τ and the restored
    checkpoint's boundary marked. After a forget, the turns the last receipt replayed are shaded.
    Returns what was drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = store.load(None)
    arts = s.state.artifacts
    plan = forget_plan(store, sources) if sources else None
    taint = set(plan["taint"]) if plan else set()
    carriers = set(plan["carriers"]) if plan else set()
    pos, row = {}, {}
    for a in arts:
        row[a.turn] = row.get(a.turn, 0) + 1
        pos[a.id] = (a.turn, -row[a.turn])
    height = max(row.values(), default=1)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.5 * (s.T + 1)), max(3.0, 0.55 * height + 1.5)))  # room for labels
    receipts = store.receipts()
    if receipts and not plan:
        last = receipts[-1]
        ax.axvspan(last["tau"] - 0.5, last["T"] + 0.5, color="#fff3cd", zorder=0,
                   label=f"replayed by the last forget (τ={last['tau']}, {last['transitions']} transitions)")
    for a in arts:
        for p in a.parents:
            if p in pos:
                (x0, y0), (x1, y1) = pos[p], pos[a.id]
                ax.annotate("", xy=(x1, y1), xytext=(x0, y0), zorder=1,
                            arrowprops={"arrowstyle": "->", "color": "#d0021b" if a.id in taint and p in taint
                                        else "#8892a0", "lw": 0.8, "shrinkA": 6, "shrinkB": 6})
    for a in arts:
        x, y = pos[a.id]
        ax.scatter([x], [y], s=160, zorder=2, color="#d0021b" if a.id in taint else COLORS.get(a.type, "#cccccc"),
                   edgecolors="#d0021b" if a.id in carriers else "#333333", linewidths=2.5 if a.id in carriers else 0.6)
        label = a.type if a.parents else f"{a.type} [{', '.join(sorted(a.source_ids))}]"  # a field: its source
        ax.text(x + 0.12, y, label, fontsize=7, va="center", zorder=3)
    if plan:
        ax.axvspan(-0.5, plan["checkpoint"] + 0.5, color="#e3f0ff", zorder=0,
                   label=f"restored from checkpoint R_{plan['checkpoint']} (shared with the twin)")
        ax.axvline(plan["tau"] - 0.5, color="#d0021b", ls="--", lw=1,
                   label=f"τ = {plan['tau']}: {plan['transitions']} transitions replayed from here")
        ax.scatter([], [], s=160, color="#d0021b", label=f"I(z): {len(taint)} artifacts")
    for type_ in sorted({a.type for a in arts}):  # the key to the colours (an I(z) node is red, its label says its type)
        ax.scatter([], [], s=60, color=COLORS.get(type_, "#cccccc"), label=type_)
    ax.set_xticks(range(0, s.T + 1))
    ax.set_xlabel("turn t")
    ax.set_yticks([])
    ax.set_xlim(-0.5, s.T + 1.2)
    ax.set_ylim(-height - 0.8, 0.2)
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    ax.set_title(title or f"provenance graph of {Path(store.path).name}: {len(arts)} artifacts, T={s.T}")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=4, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return {"path": str(path), "artifacts": len(arts), "edges": sum(len(a.parents) for a in arts),
            **({"plan": plan} if plan else {})}
