"""The receipt of a forget: its plan, the work it did, the side effects it answers for, the
digests of the state it left and its time. Built by `make_receipt`, serialized by `receipt_json`;
the command line, the store, the LangGraph integration and the benchmarks read it the same way.

The runtime protocol of `unsee.specs.protocol` reads a receipt as a flat record (tau, T,
checkpoint, transitions, compensation, replayed, ...): a `Receipt` is that record as a read-only
mapping, and its properties are the record's names for the parts' fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from unsee.model.plan import ForgetPlan


@dataclass(frozen=True)
class Work:
    """What a forget computed. `transitions` counts invocations of F (Corollary 1); the token
    counts are what an engine's forwards computed or read back, zero where no engine counts them
    (the reference runtime of `unsee.specs`)."""

    transitions: int = 0
    tokens_prefilled: int = 0  # prompt blocks and model turns' prompts
    tokens_decoded: int = 0  # drafting: tokens fed through the model one per forward, a header alone
    tokens_rematerialized: int = 0  # restore: context rows recomputed from the recorded tokens
    tokens_restored: int = 0  # restore: context rows read back (K/V pages), no compute
    replies: int = 0  # model turns decoded (replies, plans, summaries)
    replies_skipped: int = 0  # of which a recorded draft was F's reply: one prefill, no decoding
    tokens_verified: int = 0  # a model turn's prefills past its header: the reply's check (its K/V)
    tokens_reused: int = 0  # B5′: prompt-block rows taken from its prefix cache, no compute

    @property
    def tokens_computed(self) -> int:
        """Every token some forward computed: prompt blocks, decoding, verification, re-materializing."""
        return self.tokens_prefilled + self.tokens_decoded + self.tokens_verified + self.tokens_rematerialized


@dataclass(frozen=True)
class Effects:
    """Line 8's report (`unsee.model.plan.compensation`): the committed calls the replay recognised,
    and the calls on which the world and the twin disagree (A3), for compensation."""

    deduplicated: tuple[str, ...] = ()
    compensation: tuple[dict, ...] = ()


RECORD = ("sources", "method", "tau", "T", "checkpoint", "transitions", "taint", "compensation", "deduplicated",
          "replayed", "digests")  # the protocol's names (unsee.specs.protocol.RECEIPT)


@dataclass(frozen=True)
class Receipt(Mapping):
    method: str
    plan: ForgetPlan
    work: Work
    effects: Effects
    digests: Mapping[str, str]  # layer → digest of the state the forget left
    seconds: float  # the forget's wall time: plan, restore and replay
    replayed: tuple = field(default=(), repr=False)  # the sanitized õ_t fed to F, o^{-z}_{c+1}..o^{-z}_T

    # the flat record of the runtime protocol (unsee.specs.protocol.RECEIPT)
    @property
    def sources(self) -> tuple[str, ...]:
        return self.plan.sources

    @property
    def tau(self) -> int:
        return self.plan.tau

    @property
    def T(self) -> int:
        return self.plan.T

    @property
    def checkpoint(self) -> int:
        return self.plan.boundary

    @property
    def taint(self) -> tuple[str, ...]:
        return tuple(sorted(self.plan.taint))

    @property
    def transitions(self) -> int:
        return self.work.transitions

    @property
    def compensation(self) -> tuple[dict, ...]:
        return self.effects.compensation

    @property
    def deduplicated(self) -> tuple[str, ...]:
        return self.effects.deduplicated

    def __getitem__(self, key: str):
        if key not in RECORD:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self):
        return iter(RECORD)

    def __len__(self) -> int:
        return len(RECORD)


def make_receipt(method: str, plan: ForgetPlan, work: Work, effects: Effects, digests: Mapping[str, str],
                 seconds: float, replayed=()) -> Receipt:
    """The receipt of a forget operator run."""
    return Receipt(method, plan, work, effects, dict(digests), seconds, tuple(replayed))


def receipt_json(r: Receipt) -> dict[str, Any]:
    """A receipt as JSON: the plan (sources, τ, T, checkpoint), the work's counts, the time, the
    digests and the side effects (what `unsee forget --json` writes and a store keeps)."""
    out: dict[str, Any] = {"sources": list(r.sources), "method": r.method, "tau": r.tau, "T": r.T,
                           "checkpoint": r.checkpoint}
    out.update({f.name: getattr(r.work, f.name) for f in fields(Work)})
    out["seconds"] = round(r.seconds, 4)
    out["digests"] = dict(r.digests)
    out.update({"compensation": list(r.compensation), "deduplicated": list(r.deduplicated)})
    return out
