"""Deliberately broken forget operators. The specs must reject every one of them.

Each is the reference runtime with one plausible mistake in `forget`:

- `CropAtTau`             restores R_τ (which already holds z) instead of R_{τ−1};
- `OneTransitionShort`    restores R_{τ−1} but replays T−τ transitions, not T−τ+1;
- `SourceRedaction`       B3: drops z's fields and prompt blocks, keeps every derived artifact;
- `SanitizeWithoutReplay` B4: drops z and everything in I(z), regenerates nothing;
- `SpanExcision`          cuts z's tokens out of the transcript and cache, nothing else;
- `ReusePostTauCache`     replays the suffix but keeps the contaminated cache entries.
"""

from __future__ import annotations

from dataclasses import replace

from unsee.model.runtime import ReferenceRuntime
from unsee.model.session import (
    counterfactual_stream, locate_target, make_receipt, replay_suffix, provenance_graph, restore,
    choose_checkpoint, taint_closure,
)
from unsee.model.state import Block, Meter


def _finish(s, new, sources, tau, c, meter, taint=(), replayed=()):
    return new, make_receipt("mutant", sources, tau, s, new, c, meter, 0.0, taint, (), (), tuple(replayed))


def _edited(s, r2, sources, tau, taint=()):
    """A forget that edits the live state in place (no transition of F): log sanitized, R_T replaced."""
    new = replace(s, observations=counterfactual_stream(s.observations, sources),
                  states=s.states[:-1] + (r2,), forgotten=s.forgotten | set(sources))
    return _finish(s, new, sources, tau, s.T, Meter(), taint=taint)


class _Mutant(ReferenceRuntime):
    operator = None  # (session, sources) -> (session, receipt)

    def forget(self, sources, method="B7", checkpoint=None):
        self.session, receipt = type(self).operator(self.session, list(sources))
        self._meter.transitions += receipt.transitions
        self._last_checkpoint = receipt.checkpoint
        return receipt


def crop_at_tau(s, sources):
    _, tau = locate_target(s, sources)
    meter = Meter()
    c = min((c for c in s.checkpoints if c.boundary >= tau), key=lambda c: c.boundary, default=None)
    if c is None:  # no checkpoint at or after τ: crop the live state instead
        start, boundary = s.state, s.T
    else:
        start, boundary = restore(s, c, meter), c.boundary
    new, _, _, replayed = replay_suffix(s, start, boundary, sources, meter)
    return _finish(s, new, sources, tau, boundary, meter, replayed=replayed)


class CropAtTau(_Mutant):
    name = "crop-at-tau"
    operator = staticmethod(crop_at_tau)


def one_transition_short(s, sources):
    _, tau = locate_target(s, sources)
    meter = Meter()
    c = choose_checkpoint(s.checkpoints, tau)
    start = restore(s, c, meter)
    short = replace(s, observations=s.observations[:-1])
    new, _, _, replayed = replay_suffix(short, start, c.boundary, sources, meter)
    return _finish(s, new, sources, tau, c.boundary, meter, replayed=replayed)


class OneTransitionShort(_Mutant):
    name = "one-transition-short"
    operator = staticmethod(one_transition_short)


def _without_artifacts(state, drop: set[str], model):
    """Remove the given artifacts' blocks from the context, keeping the other cache entries
    as they are (stale: they were computed with z in context)."""
    tokens, positions, blocks = [], [], []
    for b in state.blocks:
        if b.artifact in drop:
            continue
        start = len(tokens)
        tokens.extend(state.tokens[b.start:b.end])
        positions.extend(range(b.start, b.end))
        blocks.append(Block(b.artifact, b.kind, start, len(tokens), b.prefill))
    return replace(state, tokens=tuple(tokens), kv=model.select(state.kv, positions), blocks=tuple(blocks))


def source_redaction(s, sources):
    arts, tau = locate_target(s, sources)
    r = s.state
    # the fields, their direct prompt blocks and memory records; derived artifacts stay
    direct = set(arts) | {a.id for a in r.artifacts
                          if a.type in ("block", "memory_record") and set(a.parents) & set(arts)
                          and a.parents[0] in arts}
    r2 = _without_artifacts(r, direct, s.lm)
    r2 = replace(r2, memory=tuple(m for m in r.memory if m[0] not in direct),
                 artifacts=tuple(a for a in r.artifacts if a.id not in direct))
    return _edited(s, r2, sources, tau)


class SourceRedaction(_Mutant):
    name = "source-redaction-B3"
    operator = staticmethod(source_redaction)


def sanitize_without_replay(s, sources):
    arts, tau = locate_target(s, sources)
    r = s.state
    taint = taint_closure(provenance_graph(r), arts)
    r2 = _without_artifacts(r, taint, s.lm)
    r2 = replace(r2, memory=tuple(m for m in r.memory if m[0] not in taint),
                 plan=tuple(p for p in r.plan if p.plan not in taint),
                 summary=None if r.summary is not None and any(
                     a.type == "summary" and a.id in taint for a in r.artifacts) else r.summary,
                 artifacts=tuple(a for a in r.artifacts if a.id not in taint))
    return _edited(s, r2, sources, tau, taint)


class SanitizeWithoutReplay(_Mutant):
    name = "sanitize-without-replay-B4"
    operator = staticmethod(sanitize_without_replay)


def span_excision(s, sources):
    arts, tau = locate_target(s, sources)
    r = s.state
    spans = {a.id for a in r.artifacts if a.type == "block" and a.parents and a.parents[0] in arts}
    r2 = _without_artifacts(r, spans, s.lm)
    return _edited(s, r2, sources, tau)


class SpanExcision(_Mutant):
    name = "span-excision"
    operator = staticmethod(span_excision)


def reuse_post_tau_cache(s, sources):
    _, tau = locate_target(s, sources)
    meter = Meter()
    c = choose_checkpoint(s.checkpoints, tau)
    contaminated = s.lm.snapshot(s.state.kv)  # R_T's cache, z's rows and all
    new, _, _, replayed = replay_suffix(s, restore(s, c, meter), c.boundary, sources, meter)
    fresh = new.state
    kv = s.lm.graft(fresh.kv, contaminated)  # the replayed tokens over the contaminated rows
    new = replace(new, states=new.states[:-1] + (replace(fresh, kv=kv),))
    return _finish(s, new, sources, tau, c.boundary, meter, replayed=replayed)


class ReusePostTauCache(_Mutant):
    """Replays T−τ+1 transitions, but splices the replayed tokens onto cache entries that
    were computed with z in context (the contaminated R_T's prefix hashes, cropped)."""

    name = "reuse-post-tau-cache"
    operator = staticmethod(reuse_post_tau_cache)


MUTANTS = (CropAtTau, OneTransitionShort, SourceRedaction, SanitizeWithoutReplay, SpanExcision,
           ReusePostTauCache)
