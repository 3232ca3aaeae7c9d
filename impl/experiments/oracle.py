"""B7-oracle: the cost-law bench's labelled comparison, not a forget operator and not exact.

It trusts a marking of the post-τ turns as independent of the target and prefills those turns'
recorded replies unchecked; every other replayed reply is decoded. The state it reaches is F's
only where the marking is right, so the bench reports it with token equality and bit-exactness
against B5. B7 (`unsee.model.session.selective_replay`) needs no marking: it hands every recorded
reply to F as a draft and keeps it only where it is F's own reply.

The replay is Algorithm 1 through the model's public functions (`locate_target`,
`suffix_closure`, `choose_checkpoint`, `restore`, `replay_suffix` with drafts, `make_receipt`);
what differs is the recording it reads (the replies of unmarked turns withheld) and the model it
runs (`TrustingLM`, which prefills a reply it is handed instead of checking it).
"""

from __future__ import annotations

import time
from dataclasses import replace

from unsee.model.session import (Receipt, Session, choose_checkpoint, locate_target, make_receipt, replay_suffix,
                                 restore, suffix_closure)
from unsee.model.state import Meter

METHOD = "B7-oracle"


class TrustingLM:
    """A session's LM whose `decode` takes a recorded reply (the draft) unchecked: the reply's
    tokens are prefilled as they were recorded, none decoded, none compared with the model's
    choice. Without a draft of the reply's length (any length under a constraint) it decodes as
    the LM does. Every other method is the LM's."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def decode(self, kv, n: int, draw_list, hint=None, constraint=None, head=()):
        if hint is not None and (len(hint) == n or constraint is not None):
            reply = tuple(int(t) for t in hint)  # the turn as one prefill, as F's schedule has it
            return reply, self.inner.prefill(kv, tuple(head) + reply), 0, len(reply)
        return self.inner.decode(kv, n, draw_list, hint, constraint=constraint, head=head)


def oracle_replay(s: Session, sources, independent) -> tuple[Session, Receipt]:
    """B7-oracle on the live session: Algorithm 1 from the latest checkpoint before τ, with the
    recorded replies of the transitions in `independent` (indices t of o_t) prefilled unchecked
    and every other post-τ reply decoded. The receipt's method is "B7-oracle"."""
    t0 = time.perf_counter()
    arts, tau = locate_target(s, sources)
    taint = suffix_closure(s.state.artifacts, arts)
    c = choose_checkpoint(s.checkpoints, tau)
    meter = Meter()  # no draft credit: a trusted reply is never checked, so it cannot be rejected
    start = restore(s, c, meter)
    marked = frozenset(independent)
    # the recording as the replay reads it: only the marked turns after the splice keep their replies
    recorded = tuple(st if i <= c.boundary or i in marked else replace(st, outputs=())
                     for i, st in enumerate(s.states))
    trusting = replace(s, states=recorded, lm=TrustingLM(s.lm))
    new, dedup, comp, replayed = replay_suffix(trusting, start, c.boundary, sources, meter, drafts=True)
    new = replace(new, lm=s.lm)
    return new, make_receipt(METHOD, sources, tau, s, new, c.boundary, meter, t0, taint, dedup, comp, replayed)
