"""Deliberately broken forget operators. The specs must reject every one of them.

Each is the reference runtime with one plausible mistake in `forget`:

- `CropAtTau`             restores R_τ (which already holds z) instead of R_{τ−1};
- `OneTransitionShort`    restores R_{τ−1} but replays T−τ transitions, not T−τ+1;
- `SourceRedaction`       B3: drops z's fields and prompt blocks, keeps every derived artifact;
- `SanitizeWithoutReplay` B4: drops z and everything in I(z), regenerates nothing;
- `SpanExcision`          cuts z's tokens out of the transcript and cache, nothing else;
- `ReusePostTauCache`     replays the suffix but keeps the contaminated cache entries.

And mistakes in what a runtime exposes, each one an engineer made (the kit must see them too):

- `StaleGraphIndex`       `graph()` is an index built as steps run and never rebuilt by a forget;
- `IgnoresMethod`         `forget` ignores `method="B5"` and a forced `checkpoint=`;
- `RecentCheckpointsOnly` keeps checkpoint payloads for the last 12 boundaries only, and falls
                          back to the oldest one it kept (which is past τ) when the right one is gone;
- `WrongLogAfterForgets`  its state is right, but the log it reports is sanitized of the latest
                          forget's sources only, so after two forgets it shows an earlier target again.

And mistakes in what a forget reports, or keeps, that leave its state right (the kit checks
each against the oracle, never against the runtime's report):

- `ReceiptTaintOneHop`    the receipt's I(z) is z's fields and their direct children only;
- `CompensationArgsSwapped` compensation entries name the right calls, but give the committed
                          arguments as the counterfactual ones;
- `CompactionsUncheckpointed` under the "events" policy, no checkpoint before a compaction
                          (the policy promises one), so a forget splices earlier than it may;
- `KeepsHiddenParts`      the log keeps a forgotten source's parts that stood instead of another
                          source (F never read them), so forgetting that other source later shows them.
"""

from __future__ import annotations

from dataclasses import replace

from unsee.model.edits import sanitize_without_replay, source_redaction, span_excision
from unsee.model.plan import plan_forget, provenance_graph
from unsee.model.replay import (counterfactual_stream, live_checkpoint, operator_receipt, replay_suffix, restore,
                                selective_replay)
from unsee.specs.reference import ReferenceRuntime


class _Mutant(ReferenceRuntime):
    operator = None  # (session, sources, transition) -> (session, receipt)

    def forget(self, sources, method="B7", checkpoint=None):
        plan = plan_forget(self.session, list(sources))
        self.session, receipt = type(self).operator(self.session, list(sources), self.transition)
        # each claims the method asked for, and I(z)
        receipt = replace(receipt, method=method, plan=replace(receipt.plan, taint=plan.taint))
        self.forgot(receipt)
        return receipt


def spliced(plan, s, c, new, effects, replayed):
    """The receipt of a mutant that spliced at checkpoint `c` (not the plan's)."""
    return operator_receipt("mutant", replace(plan, checkpoint=c), s, new, effects, replayed)


def crop_at_tau(s, sources, transition=None):
    plan = plan_forget(s, sources)
    c = min((c for c in s.checkpoints if c.boundary >= plan.tau), key=lambda c: c.boundary, default=None)
    if c is None:  # no checkpoint at or after τ: crop the live state instead
        c, start = live_checkpoint(s), s.state
    else:
        start = restore(s, c)
    new, effects, replayed = replay_suffix(s, start, c.boundary, sources, transition)
    return new, spliced(plan, s, c, new, effects, replayed)


class CropAtTau(_Mutant):
    name = "crop-at-tau"
    operator = staticmethod(crop_at_tau)


def one_transition_short(s, sources, transition=None):
    plan = plan_forget(s, sources)
    start = restore(s, plan.checkpoint)
    short = replace(s, observations=s.observations[:-1])
    new, effects, replayed = replay_suffix(short, start, plan.boundary, sources, transition)
    return new, spliced(plan, s, plan.checkpoint, new, effects, replayed)


class OneTransitionShort(_Mutant):
    name = "one-transition-short"
    operator = staticmethod(one_transition_short)


def edits(operator):
    """An in-place edit of `unsee.model.edits` as a mutant's operator (it runs no F)."""
    return staticmethod(lambda s, sources, transition=None: operator(s, sources))


class SourceRedaction(_Mutant):
    name = "source-redaction-B3"
    operator = edits(source_redaction)


class SanitizeWithoutReplay(_Mutant):
    name = "sanitize-without-replay-B4"
    operator = edits(sanitize_without_replay)


class SpanExcision(_Mutant):
    name = "span-excision"
    operator = edits(span_excision)


class ReusePostTauCache(_Mutant):
    """Replays T−τ+1 transitions, but splices the replayed tokens onto cache entries that
    were computed with z in context (the contaminated R_T's prefix hashes, cropped).
    `snapshot` and `graft` are the reference's cache (a tuple of prefix hashes); a mutant over
    another engine's cache overrides them."""

    name = "reuse-post-tau-cache"

    @staticmethod
    def snapshot(lm, kv):
        return kv

    @staticmethod
    def graft(lm, kv, old):
        """The mistake: the first min(len) rows taken from a snapshot `old`."""
        n = min(len(old), len(kv))
        return old[:n] + kv[n:]

    def forget(self, sources, method="B7", checkpoint=None):
        s, sources = self.session, list(sources)
        plan = plan_forget(s, sources)
        contaminated = self.snapshot(s.lm, s.state.kv)  # R_T's cache, z's rows and all
        new, effects, replayed = replay_suffix(s, restore(s, plan.checkpoint), plan.boundary, sources, self.transition)
        fresh = new.state
        kv = self.graft(s.lm, fresh.kv, contaminated)  # the replayed tokens over the contaminated rows
        self.session = replace(new, states=new.states[:-1] + (replace(fresh, kv=kv),))
        receipt = operator_receipt(method, plan, s, self.session, effects, replayed)
        self.forgot(receipt)
        return receipt


class StaleGraphIndex(ReferenceRuntime):
    """graph() answers from an index that step() extends and forget() never rebuilds."""

    name = "stale-graph-index"

    def reset(self) -> None:
        super().reset()
        self._index = provenance_graph(self.session.state)

    def step(self, obs) -> None:
        super().step(obs)
        fresh = provenance_graph(self.session.state)
        for n, d in fresh.nodes(data=True):
            if n not in self._index:  # an id seen before keeps its old attributes
                self._index.add_node(n, **d)
        self._index.add_edges_from(e for e in fresh.edges if not self._index.has_edge(*e))

    def graph(self):
        return self._index


class IgnoresMethod(ReferenceRuntime):
    """Always selective replay from the latest checkpoint, whatever method and checkpoint say."""

    name = "ignores-method"

    def forget(self, sources, method="B7", checkpoint=None):
        return super().forget(sources)


KEPT_BOUNDARIES = 12


def recent_checkpoints_only(s, sources, checkpoint=None, transition=None):
    plan = plan_forget(s, sources, checkpoint)
    kept = [c for c in s.checkpoints if c.boundary >= s.T - KEPT_BOUNDARIES]
    if plan.checkpoint in kept or not kept:
        return selective_replay(s, sources, checkpoint, transition)
    c = min(kept, key=lambda c: c.boundary)  # the payload it wanted is gone: the oldest it has
    new, effects, replayed = replay_suffix(s, restore(s, c), c.boundary, sources, transition)
    return new, replace(spliced(plan, s, c, new, effects, replayed), method="B7")


class RecentCheckpointsOnly(ReferenceRuntime):
    name = "recent-checkpoints-only"

    def forget(self, sources, method="B7", checkpoint=None):
        if method != "B7":
            return super().forget(sources, method, checkpoint)
        self.session, receipt = recent_checkpoints_only(self.session, list(sources), checkpoint, self.transition)
        self.forgot(receipt)
        return receipt


class WrongLogAfterForgets(ReferenceRuntime):
    """Reports the raw log sanitized of the latest forget's sources only (its state is right)."""

    name = "wrong-log-after-forgets"

    def reset(self) -> None:
        super().reset()
        self._raw: list = []
        self._latest: tuple = ()

    def step(self, obs) -> None:
        super().step(obs)
        self._raw.append(obs)

    def forget(self, sources, method="B7", checkpoint=None):
        receipt = super().forget(sources, method, checkpoint)
        self._latest = tuple(sources)
        return receipt

    @property
    def observations(self):
        return counterfactual_stream(tuple(self._raw), self._latest)


class ReceiptTaintOneHop(ReferenceRuntime):
    name = "receipt-taint-one-hop"

    def forget(self, sources, method="B7", checkpoint=None):
        g = provenance_graph(self.session.state)
        receipt = super().forget(sources, method, checkpoint)
        roots = {a for a in receipt.taint if not g.pred[a]}
        return replace(receipt, plan=replace(receipt.plan, taint=frozenset(roots | {b for a in roots for b in g.succ[a]})))


class CompensationArgsSwapped(ReferenceRuntime):
    name = "compensation-args-swapped"

    def forget(self, sources, method="B7", checkpoint=None):
        receipt = super().forget(sources, method, checkpoint)
        comp = tuple(dict(x, args=x["committed"]) if x["committed"] is not None else x for x in receipt.compensation)
        return replace(receipt, effects=replace(receipt.effects, compensation=comp))


class CompactionsUncheckpointed(ReferenceRuntime):
    """Drops the checkpoint before each compaction as it steps (the rule it meant to write)."""

    name = "compactions-uncheckpointed"

    def step(self, obs) -> None:
        super().step(obs)
        s = self.session
        if self.policy == "events" and obs.compact and not (obs.kind == "memory" or s.states[-2].plan):
            keep = tuple(c for c in s.checkpoints if c.boundary != s.T - 1 or c.boundary == 0)
            self.session = replace(s, checkpoints=keep)


class KeepsHiddenParts(ReferenceRuntime):
    """Its state is right; its log keeps the forgotten sources' parts that F never read."""

    name = "keeps-hidden-parts"

    def reset(self) -> None:
        super().reset()
        self._hidden: dict[int, tuple] = {}

    def forget(self, sources, method="B7", checkpoint=None):
        for t, o in enumerate(self.session.observations):
            kept = tuple(p for p in o.parts if p.source in sources and p.instead_of is not None)
            self._hidden[t] = self._hidden.get(t, ()) + kept
        return super().forget(sources, method, checkpoint)

    @property
    def observations(self):
        return tuple(replace(o, parts=o.parts + self._hidden.get(t, ())) if self._hidden.get(t) else o
                     for t, o in enumerate(self.session.observations))


MUTANTS = (CropAtTau, OneTransitionShort, SourceRedaction, SanitizeWithoutReplay, SpanExcision,
           ReusePostTauCache)
# mistakes in what the runtime exposes rather than in the forget operator's state
PROTOCOL_MUTANTS = (StaleGraphIndex, IgnoresMethod, RecentCheckpointsOnly, WrongLogAfterForgets)
# mistakes in the receipt, the checkpoint set or the log that leave the state right
REPORT_MUTANTS = (ReceiptTaintOneHop, CompensationArgsSwapped, CompactionsUncheckpointed, KeepsHiddenParts)


class CropsLateAfterACompaction(ReferenceRuntime):
    """Right only but in one conjunction: where the transition right before τ compacted, the forget
    is at its own checkpoint and one is kept at τ (so τ < T), it restores R_τ (as `CropAtTau`).
    Random sessions rarely place all three at once; the kit's directed programs place each."""

    name = "crops-late-after-a-compaction"

    def forget(self, sources, method="B7", checkpoint=None):
        s = self.session
        plan = plan_forget(s, list(sources))
        late = (method == "B7" and checkpoint is None and plan.tau >= 2 and plan.boundary == plan.tau - 1
                and s.observations[plan.tau - 2].compact and any(c.boundary == plan.tau for c in s.checkpoints))
        if not late:
            return super().forget(sources, method, checkpoint)
        self.session, receipt = crop_at_tau(s, list(sources), self.transition)
        self.forgot(receipt)
        return receipt


# right in every case but a conjunction of placements (the kit reaches it by construction)
RARE_MUTANTS = (CropsLateAfterACompaction,)
