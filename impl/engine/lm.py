"""TorchLM: the engine's LM over a KVEngine and a chat template. Behind `Metered` it is the LM that
the shared scaffold (`unsee.model.state.step`) calls, so the agent semantics and the provenance
graph are the reference's, and only θ differs. `KVRef` is the cache handle a state holds.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch

from unsee.impl.engine.attention import gqa_kernel
from unsee.impl.engine.kv import KVEngine, tensor_digest
from unsee.impl.engine.selftest import row_independence
from unsee.impl.engine.pages import ROOT, PageKeys, page_layout
from unsee.model.errors import UnseeError
from unsee.model.state import forward_groups
from unsee.specs.traces import Begin, Commit, RebuildBegin, RebuildEnd, StepEnd


class ContextWindowError(UnseeError):
    """A forward that would take the context past the model's window: refused before anything is
    allocated for it (an attention over more positions than the model has is both meaningless and,
    for a long text, an allocation of tens of GB)."""


def window_of(config) -> int | None:
    """The positions a model takes, BOS included: its config's `max_position_embeddings` (GPT-2's
    `n_positions`), or None where the config does not say."""
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


@dataclass(frozen=True)
class KVRef:
    """The cache a state refers to: its length in context tokens and the engine epoch
    (bumped whenever the cache is rebuilt). Only the live state's ref is resident."""

    length: int
    epoch: int


class TorchLM:
    """An engine LM (`unsee.impl.engine.metered.EngineLM`) over a KVEngine and a chat template."""

    def __init__(self, bundle, device: torch.device | None = None, threads: int = 1) -> None:
        self.bundle = bundle
        self.name = bundle.name
        self.template = bundle.template
        self.engine = KVEngine(bundle.model, device or bundle.device, threads)
        self.engine.kernel = gqa_kernel(self.engine)  # grouped heads read in place, where it gives the same bits
        self.epoch = 0
        self.bos = tuple(self.template.bos())
        self.hits = 0  # prefill rows taken from a prefix cache (B5′)
        self.ctx: list[int] = []  # the context tokens, to match against the prefix cache
        # K/V pages (see unsee.impl.engine.pages): captured after every transition when kv_pages is on;
        # `page_source(key)` reads a page persisted by an earlier process (a store), or None.
        self.kv_pages = True
        self.keys = PageKeys()
        self.pages: dict[str, torch.Tensor] = {}  # key → [layers, 2, kv_heads, n, head_dim]
        self.page_source = None
        # keys whose page `page_source` gave back (a rebuild read them): the store holds them, so
        # `after_step` does not copy their rows out of the cache again, and `page` reads them back
        self.stored: set[str] = set()
        self.chain: list[tuple[object, str]] = []  # (block, key) of the resident context, in order
        self.capture_seconds = 0.0  # time spent slicing pages out of the cache (page-write overhead)
        self.passes = 0  # fixed-point prefills of replies
        self.drafts_ok, self.drafts_note = row_independence(self.engine)
        self.window = window_of(bundle.model.config)  # positions, BOS included; None: unbounded

    # -- the event log (unsee.specs.traces) -------------------------------------------------
    def record_events(self) -> list:
        """Start a fresh event log: from now on the engine appends its forwards, crops, resets
        and page reads to it, and this adapter its rebuild brackets, commits and transition
        ends, until `stop_recording`. Returns the log (a list that grows as the engine runs).
        `KVRuntime.forget` records every forget this way; `unsee.specs.traces.check` validates it."""
        log = [Begin(len(self.bos), len(self.engine))]
        self.engine.recorder = log
        return log

    def stop_recording(self) -> None:
        self.engine.recorder = None

    # -- fast paths: opt-in, each reports what it guarantees where it is used -------------
    def prefix_cache(self, kv: KVRef, tokens):
        """B5′: a copy of the resident cache of `tokens`, for `prefill(reuse=...)`."""
        self._live(kv)
        return (tuple(tokens), copy.deepcopy(self.engine.cache))

    def branch(self) -> "TorchLM":
        """The same θ with a cloned cache: a paired branch of the current state."""
        other = copy.copy(self)
        other.engine = self.engine.clone()
        other.keys, other.pages, other.chain = self.keys.copy(), dict(self.pages), list(self.chain)
        other.stored = set(self.stored)
        return other

    # -- tokens ---------------------------------------------------------------------------
    def encode(self, kind: str, text: str) -> tuple[int, ...]:
        return tuple(self.template.block(kind, text))

    def header(self, purpose: str, tool: str | None = None) -> tuple[int, ...]:
        return tuple(self.template.header(purpose, tool))

    def grammar(self, tool):
        """The constraint of a call to `tool`: its JSON schema over this model's vocabulary."""
        from unsee.impl.engine.grammar import grammar

        return grammar(self.template, tool, self.engine.model.config.vocab_size)

    def prepare_grammar(self) -> None:
        """Build the grammar's tokenizer now (part of opening a stored session), not inside the
        first constrained reply of a forget."""
        from unsee.impl.engine.grammar import prepare

        prepare(self.template, self.engine.model.config.vocab_size)

    def json_text(self, tokens) -> str:
        """The text of a constrained reply (its end token dropped)."""
        from unsee.impl.engine.grammar import json_text

        return json_text(self.template, tokens)

    # -- the cache --------------------------------------------------------------------------
    def _live(self, kv: KVRef) -> None:
        if kv.epoch != self.epoch or kv.length + len(self.bos) != len(self.engine):
            raise UnseeError(f"cache handle {kv} is not resident (engine epoch {self.epoch}, "
                             f"length {len(self.engine)}); restore it from a checkpoint first")

    def resident(self, kv) -> bool:
        return isinstance(kv, KVRef) and kv.epoch == self.epoch and kv.length + len(self.bos) == len(self.engine)

    def _room(self, n: int, what: str) -> None:
        """Refuse a forward of n more positions past the window, before anything is allocated."""
        if self.window is not None and len(self.engine) + n > self.window:
            raise ContextWindowError(
                f"{what} of {n} tokens would take the context to {len(self.engine) + n} positions, past "
                f"{self.name}'s context window of {self.window} (BOS included); compact the context (an "
                "observation with compact) or shorten the observations and replies")

    def _ref(self) -> KVRef:
        return KVRef(len(self.engine) - len(self.bos), self.epoch)

    def empty(self) -> KVRef:
        self.engine.reset()
        self.epoch += 1
        self.engine.prefill(self.bos)
        self.ctx = []
        self.chain = []
        return self._ref()

    def prefill(self, kv: KVRef, tokens, logits: bool = False, reuse=None) -> KVRef:
        self._live(kv)
        tokens = list(tokens)
        self._room(len(tokens), "a prompt block")
        n, b = len(self.ctx), len(self.bos)
        if not logits and self.reuses(kv, tokens, reuse):
            # a whole block inside the resident prefix: reuse its rows (same schedule, same bits)
            self.engine.append_rows(reuse[1], b + n, b + n + len(tokens))
            self.hits += len(tokens)
        else:  # a prompt block's logits are never read: a header follows before any choice
            self.engine.prefill(tokens, logits=logits)
        self.ctx += tokens
        return self._ref()

    def reuses(self, kv: KVRef, tokens, reuse) -> bool:
        """A whole block inside the resident prefix of the prefix cache `reuse`?"""
        n, tokens = len(self.ctx), list(tokens)
        return bool(reuse) and bool(tokens) and list(reuse[0][:n]) == self.ctx \
            and list(reuse[0][n:n + len(tokens)]) == tokens

    def decode(self, kv: KVRef, n: int, draws, hint=None, constraint=None, head=()):
        """F's model turn: the header `head` and the reply as one prefill (KVEngine.fixed_point),
        from the recorded `hint` as the draft when the backend keeps rows independent. Returns
        (reply, ref, tokens computed by forwards of their own, tokens of the turn's prefills past
        its header's first). `constraint` (from `grammar`): at most n tokens under a tool's JSON schema."""
        self._live(kv)
        head = list(head)
        self._room(len(head) + n, "a model turn (its prompt, header and reply)")
        v0 = self.engine.tokens_verified
        if constraint is not None:
            out, decoded, passes = self.engine.fixed_point_under(n, draws, hint, constraint, exact_rows=self.drafts_ok,
                                                                 head=head)
        elif n == 0:
            self.engine.prefill(head, logits=False)  # a header alone: nothing reads its logits
            out, decoded, passes = (), 0, 0
        else:
            out, decoded, passes = self.engine.fixed_point(n, draws, hint, exact_rows=self.drafts_ok, head=head)
        self.passes += passes
        self.ctx += head + list(out)
        return out, self._ref(), decoded, self.engine.tokens_verified - v0

    def decode_cost(self, n: int, head: int = 0) -> int:
        """A model turn of an n-token reply decoded without a draft, past its header's prompt
        tokens: the header alone, n − 1 one-token forwards (the last token is picked without one),
        then the reply in the turn's prefill."""
        return head + 2 * n - 1 if n else 0

    def kv_length(self, kv: KVRef) -> int:
        """Context tokens the resident cache holds (the BOS row is the engine's, not the
        context's); a handle that is not resident is refused."""
        self._live(kv)
        return len(self.engine) - len(self.bos)

    def crop(self, kv: KVRef, n: int) -> KVRef:
        self._live(kv)
        self.engine.crop(len(self.bos) + n)
        self.ctx = self.ctx[:n]
        self.chain = [(b, k) for b, k in self.chain if b.end <= n]
        return self._ref()

    def rebuild(self, tokens, blocks) -> tuple[KVRef, int]:
        """The cache of a context given as recorded tokens and blocks, bit for bit as the
        canonical schedule computed it. Returns (ref, tokens computed).

        Leading blocks still resident at the same positions are kept (a compaction keeps its
        system blocks); then blocks with a K/V page are read back; the rest is re-materialized
        on the canonical schedule (`forward_groups`: each forward as one prefill, a model turn's
        joined prompt blocks, header and reply together). What is kept or read back is whole
        forwards: a forward's rows are recomputed all together or not at all."""
        tokens, blocks = list(tokens), list(blocks)
        if self.window is not None and len(self.bos) + len(tokens) > self.window:
            raise ContextWindowError(f"a context of {len(tokens)} tokens does not fit {self.name}'s context window "
                                     f"of {self.window} (BOS included); it cannot be re-materialized on this model")
        log = self.engine.recorder
        if log is not None:
            log.append(RebuildBegin())
        keys = self.keys.keys(tokens, blocks)
        keep = 0
        while keep < min(len(keys), len(self.chain)) and self.chain[keep][1] == keys[keep]:
            keep += 1
        while keep and blocks[keep - 1].joined:  # not past a forward's first block
            keep -= 1
        if keep and len(self.engine) < len(self.bos) + blocks[keep - 1].end:
            keep = 0
        if keep:
            end = blocks[keep - 1].end
            self.engine.crop(len(self.bos) + end)
            self.epoch += 1
        else:
            self.empty()
        groups = [g for g in forward_groups(blocks) if g[0] >= keep]
        paged = 0  # blocks after the kept ones whose rows were read back from a K/V page

        def whole(first, last):
            """The pages of one forward's blocks, or None when any is missing."""
            got = [self.page(keys[i]) for i in range(first, last + 1)]
            return None if any(p is None for p in got) else got

        def pages(ready):
            """Each forward's pages, read only once the forward before it is in the cache."""
            nonlocal paged
            for k, (first, last) in enumerate(groups):
                got = ready if k == 0 else whole(first, last)
                if got is None:
                    return
                ready = None
                paged += len(got)
                while got:
                    yield got.pop(0)
        ready = whole(*groups[0]) if self.kv_pages and groups else None
        if ready is not None:  # no page at all: nothing appended, nothing recorded
            stream, ready = pages(ready), None  # the stream alone holds the first pages
            self.engine.append_pages(stream, rows=len(tokens) - (blocks[keep - 1].end if keep else 0))
        computed = 0
        for first, last in groups:  # the canonical schedule: one prefill per forward
            if last < keep + paged:
                continue
            a, b = blocks[first].start, blocks[last].end
            self.engine.prefill(tokens[a:b], logits=False)  # only the K/V rows are read
            computed += b - a
        self.ctx = tokens
        self.chain = list(zip(blocks, keys))
        kv = self._ref()
        if log is not None:
            log.append(RebuildEnd(len(tokens)))
        if kv.length != len(tokens):
            raise UnseeError(f"re-materialized {kv.length} positions for {len(tokens)} recorded tokens")
        return kv, computed

    # -- K/V pages ----------------------------------------------------------------------------
    def page(self, key: str) -> torch.Tensor | None:
        if key in self.pages:
            return self.pages[key]
        page = None if self.page_source is None else self.page_source(key)
        if page is not None:
            self.stored.add(key)
        return page

    def after_step(self, state) -> None:
        """Capture the K/V rows of every block of R_t not paged yet (each block once): neither
        captured before nor read back from the page source (a restored prefix is not copied again)."""
        if not self.resident(state.kv):
            raise UnseeError("after_step: the state's cache is not the resident one")
        log = self.engine.recorder
        if log is not None:
            fresh = []  # the calls this transition committed: the ledger's tail
            for e in reversed(state.ledger):
                if e.turn != state.turn:
                    break
                fresh.append(Commit(state.turn, e.call_id, e.tool))
            log += reversed(fresh)
            log.append(StepEnd(state.turn, len(state.tokens)))
        keys = self.keys.keys(state.tokens, state.blocks)
        self.chain = list(zip(state.blocks, keys))
        if not self.kv_pages:
            return
        t0 = time.perf_counter()
        b = len(self.bos)
        for blk, key in self.chain:
            if key not in self.pages and key not in self.stored:
                self.pages[key] = self.engine.rows(b + blk.start, b + blk.end)
        self.capture_seconds += time.perf_counter() - t0

    def page_layout(self) -> dict:
        return page_layout(self.engine.rows(0, 1))

    @property
    def load_seconds(self) -> float:
        return self.bundle.load_seconds

    def identity(self) -> dict:
        """Everything besides the log that decides the bits of a state: a store records it and
        every later process must match it (unsee.impl.store.digests.identity_of)."""
        import transformers

        b = self.bundle
        return {"weights_sha256": b.weights_sha256(), "dtype": str(b.dtype).removeprefix("torch."),
                "attn": getattr(b.model.config, "_attn_implementation", None), "threads": self.engine.threads,
                "device": self.engine.device.type, "layout": self.page_layout(), "schedule": ROOT,
                "torch": torch.__version__, "transformers": transformers.__version__}

    def select(self, kv: KVRef, positions) -> KVRef:
        self._live(kv)
        b = len(self.bos)
        self.engine.select(list(range(b)) + [p + b for p in positions])
        self.ctx = [self.ctx[p] for p in positions]
        self.chain = []  # the rows left are no block's rows at their positions
        return self._ref()

    def kv_digest(self, kv: KVRef) -> str:
        self._live(kv)
        return tensor_digest(t for pair in self.engine.kv_tensors() for t in pair)
