"""F as an engine runs it: `unsee.model.state.step` over an engine's LM, with the engine's fast
paths and the counts a receipt reports.

`unsee.model` defines F with the few methods its `LM` protocol asks for. An engine LM (`TorchLM`
on transformers, `ReferenceEngine` on the reference model) offers more (`EngineLM`): a decode that
starts from a draft and says what it computed, a prefill that can take rows from a prefix cache, a
rebuild that says how much it recomputed, and bookkeeping after each transition (K/V pages, the
event log). `Metered` puts an engine LM behind the model's protocol and counts; `EngineTransition`
is F with it: the recorded replies of the same transition handed over as drafts (B7), then the
engine's bookkeeping. The state is F's either way: a draft is kept only where it is F's own reply.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Protocol

from unsee.model.receipt import Work
from unsee.model.state import step


class EngineLM(Protocol):
    """What an engine offers besides `unsee.model.lm.LM` (whose methods it also has, but for the
    three below, which it answers with more)."""

    name: str
    kv_pages: bool
    load_seconds: float | None  # what loading the weights took (None: nothing was loaded)
    template: Any  # the chat template (`unsee.impl.engine.templates`), None for the reference

    def prefill(self, kv: Any, tokens, logits: bool = False, reuse: Any = None) -> Any: ...
    def decode(self, kv: Any, n: int, draw_list, hint=None, constraint=None, head=()
               ) -> tuple[tuple[int, ...], Any, int, int]: ...
    def rebuild(self, tokens, blocks) -> tuple[Any, int]: ...
    def reuses(self, kv: Any, tokens, reuse: Any) -> bool: ...
    def prefix_cache(self, kv: Any, tokens) -> Any: ...
    def decode_cost(self, n: int, head: int = 0) -> int: ...
    def after_step(self, state) -> None: ...
    def identity(self) -> dict: ...
    def prepare_grammar(self) -> None: ...
    def record_events(self) -> list | None: ...
    def stop_recording(self) -> None: ...


@dataclass
class Meter:
    """What the forwards of one operator run computed or read back (see `Work`)."""

    tokens_prefilled: int = 0
    tokens_decoded: int = 0
    tokens_rematerialized: int = 0
    tokens_restored: int = 0
    replies: int = 0
    replies_skipped: int = 0
    tokens_verified: int = 0
    tokens_reused: int = 0

    def work(self, transitions: int) -> Work:
        return Work(transitions, **{f.name: getattr(self, f.name) for f in fields(self)})


class Metered:
    """The model's `LM` over an engine LM: each call counted in `meter`, with two fast paths, each
    exact. `drafts`: the recorded replies of the transition running, in decode order (each is
    checked; the engine keeps it only where it is F's reply). `credit`: tokens rejected drafts may
    still waste (None: no bound): a draft of n tokens is tried only while the credit is at least n,
    and each adds what it saved against decoding (negative when it was rejected). `reuse`: B5′'s
    prefix cache."""

    def __init__(self, engine: EngineLM) -> None:
        self.engine = engine
        self.name = engine.name
        self.meter = Meter()
        self.drafts: list = []
        self.credit: int | None = None
        self.reuse = None
        self.in_step = False  # a rebuild inside a transition is a compaction's, outside it a restore's

    # the model's protocol, as the engine answers it
    def encode(self, kind: str, text: str):
        return self.engine.encode(kind, text)

    def header(self, purpose: str, tool: str | None = None):
        return self.engine.header(purpose, tool)

    def grammar(self, tool):
        return self.engine.grammar(tool)

    def json_text(self, tokens) -> str:
        return self.engine.json_text(tokens)

    def empty(self):
        return self.engine.empty()

    def crop(self, kv, n: int):
        return self.engine.crop(kv, n)

    def kv_length(self, kv) -> int:
        return self.engine.kv_length(kv)

    def resident(self, kv) -> bool:
        return self.engine.resident(kv)

    def select(self, kv, positions):
        return self.engine.select(kv, positions)

    def kv_digest(self, kv) -> str:
        return self.engine.kv_digest(kv)

    # the three calls that compute, counted
    def prefill(self, kv, tokens):
        tokens = tuple(tokens)
        if self.reuse is not None and self.engine.reuses(kv, tokens, self.reuse):
            self.meter.tokens_reused += len(tokens)  # B5′: the prefix cache's rows, no compute
        else:
            self.meter.tokens_prefilled += len(tokens)
        return self.engine.prefill(kv, tokens, reuse=self.reuse)

    def decode(self, kv, n: int, draw_list, constraint=None, head=()):
        hint = self.drafts.pop(0) if self.drafts else None
        size = 0 if hint is None else len(hint)  # a call's reply may end before n: its draft may too
        drafting = n > 0 and (size == n if constraint is None else 0 < size <= n)
        if drafting and self.credit is not None and self.credit < size:
            hint, drafting = None, False  # a rejected draft could cost more than drafts have saved
        out, kv, decoded, verified = self.engine.decode(kv, n, draw_list, hint, constraint=constraint, head=head)
        if drafting and self.credit is not None:  # what the draft saved (or cost) against decoding
            self.credit += self.engine.decode_cost(size, len(head)) - decoded - verified
        m = self.meter
        m.tokens_prefilled += len(head)
        m.tokens_decoded += decoded
        m.tokens_verified += verified
        if n:
            m.replies += 1
            m.replies_skipped += hint is not None and decoded == 0 and out == tuple(hint)
        return out, kv

    def rebuild(self, tokens, blocks):
        kv, computed = self.engine.rebuild(tokens, blocks)
        if self.in_step:  # a compaction's new context: what it computed is prefill
            self.meter.tokens_prefilled += computed
        else:  # a restore: read back from the stored trajectory, recomputed where no page is kept
            self.meter.tokens_rematerialized += computed
            self.meter.tokens_restored += len(tokens) - computed
        return kv


class EngineTransition:
    """F over a `Metered` LM: R_t = step(R_{t-1}, o_t, metered), then the engine's bookkeeping.

    `recorded`: the states of a recorded run (R_0..R_T); transition t then gets R_t's replies as
    drafts. `credit_from_restore`: start the draft credit, at the first transition, at what the
    restore before it saved against a full reset (R_c's context tokens, less those it recomputed),
    so drafts never make a forget compute more tokens than B5. `drafts`: for one live step, the
    replies to try."""

    def __init__(self, metered: Metered, recorded=None, credit_from_restore: bool = False, drafts=None) -> None:
        self.metered = metered
        self.recorded = recorded
        self.credit_from_restore = credit_from_restore
        self.once = list(drafts) if drafts else []

    def __call__(self, r, obs):
        m = self.metered
        if self.credit_from_restore:
            m.credit = len(r.tokens) - m.meter.tokens_rematerialized
            self.credit_from_restore = False
        if self.recorded is not None:
            m.drafts = list(self.recorded[r.turn + 1].outputs)
        else:
            m.drafts, self.once = self.once, []
        m.in_step = True
        try:
            r2 = step(r, obs, m)
        finally:
            m.in_step, m.drafts = False, []
        m.engine.after_step(r2)
        return r2
