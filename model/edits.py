"""Forgets that edit the live state instead of replaying it: B3 source redaction, B4 sanitize
without replay, and span excision (the paper's Experiments).

None of them runs a transition of F: each rewrites R_T in place and sanitizes the log, which
leaves a state no twin reaches. The specs show it (`unsee.specs.mutants` wraps them as
runtimes the specs must reject); the audits measure what it leaks (`unsee.impl`'s baselines
apply them to a real model's session).
"""

from __future__ import annotations

from dataclasses import replace

from unsee.model.plan import plan_forget, provenance_graph, taint_closure
from unsee.model.replay import counterfactual_stream, live_checkpoint, operator_receipt
from unsee.model.state import Block


def edited(s, r2, plan, taint=frozenset(), method: str = "edit"):
    """A forget that edits the live state in place (no transition of F): log sanitized, R_T
    replaced. Its receipt says it spliced at R_T and ran F zero times; `taint` is what it removed."""
    sources = plan.sources
    new = replace(s, observations=counterfactual_stream(s.observations, sources),
                  states=s.states[:-1] + (r2,), forgotten=s.forgotten | set(sources))
    return new, operator_receipt(method, replace(plan, checkpoint=live_checkpoint(s), taint=frozenset(taint)), s, new)


def without_artifacts(state, drop: set[str], model):
    """Remove the given artifacts' blocks from the context, keeping the other cache entries
    as they are (stale: they were computed with z in context)."""
    tokens, positions, blocks = [], [], []
    for b in state.blocks:
        if b.artifact in drop:
            continue
        start = len(tokens)
        tokens.extend(state.tokens[b.start:b.end])
        positions.extend(range(b.start, b.end))
        blocks.append(Block(b.artifact, b.kind, start, len(tokens), b.prefill))  # not joined: rows selected, not computed
    return replace(state, tokens=tuple(tokens), kv=model.select(state.kv, positions), blocks=tuple(blocks))


def source_redaction(s, sources):
    """B3: drops z's fields, their prompt blocks and memory records; every derived artifact stays."""
    plan = plan_forget(s, sources)
    arts = plan.carriers
    r = s.state
    direct = set(arts) | {a.id for a in r.artifacts
                          if a.type in ("block", "memory_record") and set(a.parents) & set(arts)
                          and a.parents[0] in arts}
    r2 = without_artifacts(r, direct, s.lm)
    r2 = replace(r2, memory=tuple(m for m in r.memory if m[0] not in direct),
                 artifacts=tuple(a for a in r.artifacts if a.id not in direct))
    return edited(s, r2, plan)


def sanitize_without_replay(s, sources):
    """B4: drops z and everything in I(z) (blocks, records, plans, a tainted summary); regenerates nothing."""
    plan = plan_forget(s, sources)
    r = s.state
    taint = taint_closure(provenance_graph(r), plan.carriers)
    r2 = without_artifacts(r, taint, s.lm)
    r2 = replace(r2, memory=tuple(m for m in r.memory if m[0] not in taint),
                 plan=tuple(p for p in r.plan if p.plan not in taint),
                 summary=None if r.summary is not None and any(
                     a.type == "summary" and a.id in taint for a in r.artifacts) else r.summary,
                 artifacts=tuple(a for a in r.artifacts if a.id not in taint))
    return edited(s, r2, plan, taint)


def span_excision(s, sources):
    """Cuts z's prompt blocks out of the transcript and the cache, nothing else."""
    plan = plan_forget(s, sources)
    r = s.state
    spans = {a.id for a in r.artifacts if a.type == "block" and a.parents and a.parents[0] in plan.carriers}
    r2 = without_artifacts(r, spans, s.lm)
    return edited(s, r2, plan)
