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

from unsee.model.edits import finish, sanitize_without_replay, source_redaction, span_excision
from unsee.model.runtime import ReferenceRuntime
from unsee.model.session import choose_checkpoint, locate_target, replay_suffix, restore
from unsee.model.state import Meter


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
    return finish(s, new, sources, tau, boundary, meter, replayed=replayed)


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
    return finish(s, new, sources, tau, c.boundary, meter, replayed=replayed)


class OneTransitionShort(_Mutant):
    name = "one-transition-short"
    operator = staticmethod(one_transition_short)


class SourceRedaction(_Mutant):
    name = "source-redaction-B3"
    operator = staticmethod(source_redaction)


class SanitizeWithoutReplay(_Mutant):
    name = "sanitize-without-replay-B4"
    operator = staticmethod(sanitize_without_replay)


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
    return finish(s, new, sources, tau, c.boundary, meter, replayed=replayed)


class ReusePostTauCache(_Mutant):
    """Replays T−τ+1 transitions, but splices the replayed tokens onto cache entries that
    were computed with z in context (the contaminated R_T's prefix hashes, cropped)."""

    name = "reuse-post-tau-cache"
    operator = staticmethod(reuse_post_tau_cache)


MUTANTS = (CropAtTau, OneTransitionShort, SourceRedaction, SanitizeWithoutReplay, SpanExcision,
           ReusePostTauCache)
