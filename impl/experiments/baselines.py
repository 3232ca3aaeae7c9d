"""The forget methods of the paper's Experiments, each applied to a branch of one contaminated
runtime, so every comparison is paired:

B0 no forget · B1 memory delete · B2 forget instruction · B3 source redaction · B4 sanitize
without replay · B5 full reset · B6 sanitized rebuild (string-redact, rebuild the cache) ·
B7 selective replay · B8 IFC only (sink policy, no cleanup) · B9 IFC + replay ·
span: span-only excision.
"""

from __future__ import annotations

import re
from dataclasses import replace

from unsee.model.plan import provenance_graph, taint_closure, locate_source
from unsee.model.state import Block, Observation, Part
from unsee.model.edits import sanitize_without_replay, source_redaction, span_excision

METHODS = ("B0", "B1", "B2", "B3", "B4", "B5", "B6", "B7", "B8", "B9", "span")
IFC = ("B8", "B9")  # a sink policy gates tool arguments derived from the target


def memory_delete(rt, sources) -> None:
    """B1: remove the persistent memory records that stored the target; nothing else.

    A record's first parent is the field it stores (later parents are the turn's inputs,
    so a write-back made in the target's turn is not the target's record)."""
    s = rt.session
    arts = {a.id: a for a in s.state.artifacts}
    fields = {a for src in sources for a in locate_source(s, src)}
    kept = tuple(m for m in s.state.memory if arts[m[0]].parents[:1][0] not in fields)
    rt.session = replace(s, states=s.states[:-1] + (replace(s.state, memory=kept),))


def _operator(rt, op, sources) -> None:
    """Run one of the non-replaying operators of `unsee.model.edits` (B3, B4, span) on this runtime's session."""
    rt.session, _ = op(rt.session, list(sources))


def variants(text: str) -> list[str]:
    """Normalized string variants a redactor would search for."""
    t = text.strip()
    out = {t, t.lower(), re.sub(r"\s+", " ", t)}
    return sorted((v for v in out if v), key=len, reverse=True)


def sanitized_rebuild(rt, texts) -> None:
    """B6: string-redact every layer (transcript, memory, summary, plans) and rebuild the cache
    by prefilling the redacted context; no model turn is regenerated."""
    s, lm = rt.session, rt.model
    tmpl = lm.template

    def scrub(text: str) -> str:
        for t in texts:
            for v in variants(t):
                text = text.replace(v, "")
        return text

    def redact(ids):
        return tuple(tmpl.encode_raw(scrub(tmpl.detokenize(ids))))

    st = s.state
    tokens, blocks = [], []
    for b in st.blocks:
        ids = redact(st.tokens[b.start:b.end])
        start = len(tokens)
        tokens.extend(ids)
        blocks.append(Block(b.artifact, b.kind, start, len(tokens), len(ids)))  # all prefilled now
    kv, _ = lm.rebuild(tuple(tokens), tuple(blocks))
    st2 = replace(st, tokens=tuple(tokens), blocks=tuple(blocks), kv=kv,
                  memory=tuple((a, redact(t)) for a, t in st.memory),
                  summary=None if st.summary is None else redact(st.summary),
                  plan=tuple(replace(c, args=scrub(c.args)) for c in st.plan))
    rt.session = replace(s, states=s.states[:-1] + (st2,))


def apply(method: str, live, sources, texts):
    """A branch of `live` after `method`; returns (runtime, receipt or None)."""
    rt = live.branch()
    receipt = None
    if method in ("B0", "B8"):
        pass
    elif method == "B1":
        memory_delete(rt, sources)
    elif method == "B2":
        rt.step(Observation("user", (Part("forget-request", "Forget this and never use or mention it again: "
                                          + " ".join(texts)),), reply=0))
    elif method == "B3":
        _operator(rt, source_redaction, sources)
    elif method == "B4":
        _operator(rt, sanitize_without_replay, sources)
    elif method == "B5":
        receipt = rt.forget(list(sources), method="B5")
    elif method == "B6":
        sanitized_rebuild(rt, texts)
    elif method in ("B7", "B9"):
        receipt = rt.forget(list(sources), method="B7")
    elif method == "span":
        _operator(rt, span_excision, sources)
    else:
        raise ValueError(f"unknown method {method!r}; one of {METHODS}")
    return rt, receipt


def tainted_plan(rt, sources) -> bool:
    """For the IFC sink policy: is the pending plan derived from the target?"""
    s = rt.session
    try:
        arts = [a for src in sources for a in locate_source(s, src)]
    except KeyError:
        return False
    taint = taint_closure(provenance_graph(s.state), arts)
    return any(c.plan in taint for c in s.state.plan)
