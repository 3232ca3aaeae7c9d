"""B7-oracle: the cost-law bench's labelled comparison, not a forget operator and not exact.

It trusts a marking of the post-τ turns as independent of the target and prefills those turns'
recorded replies unchecked; every other replayed reply is decoded. The state it reaches is F's
only where the marking is right, so the bench reports it with token equality and bit-exactness
against B5. B7 (`unsee.model.replay.selective_replay` under the engine's F) needs no marking: it
hands every recorded reply to F as a draft and keeps it only where it is F's own reply.

The replay is Algorithm 1 itself (`selective_replay`); what differs is the recording its F reads
(the replies of unmarked turns withheld) and the engine it runs (`Trusting`, which prefills a
reply it is handed instead of checking it).
"""

from __future__ import annotations

from dataclasses import replace

from unsee.impl.engine.metered import EngineTransition, Metered
from unsee.model.receipt import Receipt
from unsee.model.replay import selective_replay

METHOD = "B7-oracle"


class Trusting:
    """An engine LM whose `decode` takes a recorded reply (the draft) unchecked: the reply's
    tokens are prefilled as they were recorded, none decoded, none compared with the model's
    choice. Without a draft of the reply's length (any length under a constraint) it decodes as
    the engine does. Every other call is the engine's (it stands for the engine it wraps)."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def decode(self, kv, n: int, draw_list, hint=None, constraint=None, head=()):
        if hint is not None and (len(hint) == n or constraint is not None):
            reply = tuple(int(t) for t in hint)  # the turn as one prefill, as F's schedule has it
            return reply, self.inner.prefill(kv, tuple(head) + reply), 0, len(reply)
        return self.inner.decode(kv, n, draw_list, hint, constraint=constraint, head=head)


def oracle_replay(rt, sources, independent) -> Receipt:
    """B7-oracle on a runtime's live session (`unsee.impl.engine.kv_runtime.KVRuntime`): Algorithm 1
    from the latest checkpoint before τ, with the recorded replies of the transitions in
    `independent` (indices t of o_t) prefilled unchecked and every other post-τ reply decoded. The
    runtime is left in the state it reaches; the receipt's method is "B7-oracle"."""
    s = rt.session
    trusting = Metered(Trusting(rt.lm.engine))  # no draft credit: a trusted reply is never checked
    marked = frozenset(independent)
    # the recording as the replay reads it: only the marked turns keep their replies
    recorded = tuple(st if i in marked else replace(st, outputs=()) for i, st in enumerate(s.states))
    new, receipt = selective_replay(replace(s, lm=trusting), sources, transition=EngineTransition(trusting, recorded),
                                    method=METHOD)
    rt.session = new
    rt.core.forgot(receipt)
    return replace(receipt, work=trusting.meter.work(receipt.transitions))
