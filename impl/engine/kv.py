"""KVEngine: prefill, decode, crop and clone over a transformers causal LM, with counters.

The engine runs the canonical schedule that defines F's bits (README: "bit-exact"): one
forward per prompt block; a model turn (its header and its reply) as one prefill, the reply
being the fixed point of that prefill's choices (`KVEngine.fixed_point`); batch size 1, a
pinned thread count, deterministic algorithms (`unsee.impl.engine.exact`). `TorchLM`
(`unsee.impl.engine.lm`) puts it behind the LM interface that the shared scaffold
(`unsee.model.state.step`) calls; the audit's batched decode is `unsee.impl.engine.batched`.
"""

from __future__ import annotations

import copy
import hashlib
import threading
import time

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from unsee.impl.engine.exact import ExactnessError, check_exact_config, pin_determinism
from unsee.model.errors import UnseeError
from unsee.specs.traces import Append, Crop, Forward, Reset


KERNEL_SWITCH = threading.RLock()  # held while a model's attention kernel is switched for some forwards


class RowsLayer(DynamicLayer):
    """A cache layer whose new rows are written in place into a preallocated buffer, instead of
    concatenating the whole layer into fresh storage at every forward. `keys` and `values` stay
    views of the buffer's first rows: the same values, shape and dtype as concatenation gives.
    Whoever replaces `keys` with other storage (a crop that moves the rows, a selection) is
    followed: the next update copies the rows into a new buffer and zeroes both old copies."""

    CHUNK = 256  # rows allocated at a time (the buffer at least doubles when it grows)
    buffers: tuple | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = self.keys.shape[-2] if self.keys.numel() else 0
        m = n + key_states.shape[-2]
        bk, bv = self._room(n, m, key_states, value_states)
        bk[..., n:m, :] = key_states
        bv[..., n:m, :] = value_states
        self.keys, self.values = bk[..., :m, :], bv[..., :m, :]
        return self.keys, self.values

    def _room(self, n: int, m: int, key_states, value_states) -> tuple:
        old = self.buffers
        if old is not None and old[0].shape[:2] == key_states.shape[:2] and old[0].shape[-1] == key_states.shape[-1] \
                and old[0].dtype == key_states.dtype and (n == 0 or (
                    self.keys.data_ptr() == old[0].data_ptr() and self.keys.stride() == old[0].stride()
                    and self.values.data_ptr() == old[1].data_ptr() and self.values.stride() == old[1].stride())):
            if m <= old[0].shape[-2]:
                return old
        cap = -(-max(m, 2 * (0 if old is None else old[0].shape[-2])) // self.CHUNK) * self.CHUNK
        b, h, _, d = key_states.shape
        new = (key_states.new_zeros((b, h, cap, d)), value_states.new_zeros((b, value_states.shape[1], cap, d)))
        if n:
            new[0][..., :n, :] = self.keys
            new[1][..., :n, :] = self.values
            if old is None or self.keys.data_ptr() != old[0].data_ptr():
                self.keys.zero_()  # rows of the layer's own that were not in the buffer (a crop's copy):
                self.values.zero_()  # their bytes go with them
        self.wipe()
        self.buffers = new
        return new

    def reserve(self, rows: int) -> None:
        """Room for `rows` rows at least, allocated once (before appending many pages, which would
        otherwise grow the buffer page by page)."""
        if self.is_initialized and self.keys.numel() and (self.buffers is None or rows > self.buffers[0].shape[-2]):
            n = self.keys.shape[-2]
            bk, bv = self._room(n, max(rows, n), self.keys, self.values)
            self.keys, self.values = bk[..., :n, :], bv[..., :n, :]

    def keep(self, length: int) -> bool:
        """Crop to `length` rows inside the buffer: the dropped rows are zeroed where they lie, so
        no dropped byte survives and the kept rows need no copy. False when the layer's rows are not
        this buffer's (nothing done), or the buffer would stay over four times the rows kept (and over
        one chunk): the caller then moves the rows to storage of their size."""
        old = self.buffers
        if old is None or not self.keys.numel() or self.keys.data_ptr() != old[0].data_ptr() \
                or self.values.data_ptr() != old[1].data_ptr() or old[0].shape[-2] > max(4 * length, self.CHUNK):
            return False
        n = self.keys.shape[-2]
        old[0][..., length:n, :].zero_()
        old[1][..., length:n, :].zero_()
        self.keys, self.values = old[0][..., :length, :], old[1][..., :length, :]
        return True

    def wipe(self) -> None:
        """Overwrite the buffer's bytes (before it is dropped)."""
        if self.buffers is not None:
            for t in self.buffers:
                t.zero_()
            self.buffers = None


def new_cache() -> DynamicCache:
    """An empty cache whose layers write rows in place (`RowsLayer`)."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = RowsLayer
    return cache


class KVEngine:
    """One session's cache over a shared model. Counts forwards and tokens.

    `recorder`: None, or a list the engine appends its events to (`unsee.specs.traces`:
    Forward, Crop, Reset, Append), in order, as it runs; `TorchLM.record_events` sets it.
    Recording reads no tensor and changes no computation."""

    def __init__(self, model, device: torch.device, threads: int = 1, kernel: str | None = None) -> None:
        """kernel: the attention function the forwards run under in place of the model's own
        "sdpa" (None: the model's own); `unsee.impl.engine.attention.gqa_kernel` picks one."""
        check_exact_config(model)
        self.model = model
        self.device = device
        self.threads = threads
        pin_determinism(device, threads)
        self.cache = new_cache()
        self.logits: torch.Tensor | None = None  # [V] after the last forward
        self.forwards = 0
        self.tokens_prefilled = 0
        self.tokens_decoded = 0
        self.tokens_verified = 0  # of tokens_prefilled: `fixed_point`'s prefills past a turn's first header
        self.verify_seconds = 0.0  # prefills that check a reply's fixed point (reported, never asserted)
        self.recorder: list | None = None
        self.kernel = kernel

    def __len__(self) -> int:
        return self.cache.get_seq_length()

    @torch.inference_mode()
    def _forward(self, ids: list[int], kind: str = "prefill", logits: bool = True) -> None:
        """One forward; logits=False: a block whose logits nobody reads (a prompt block before a
        header, a rebuilt block), so the output layer runs on one row instead of every row and
        `logits` is left unset. The K/V rows are the same bits either way: the output layer
        reads the last hidden states, it writes no cache."""
        if self.recorder is not None:
            self.recorder.append(Forward(kind, len(self), len(ids), logits))
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)  # [1, S]
        out = self.call(input_ids, **({} if logits else {"logits_to_keep": 1}))
        self.logits = out.logits[0, -1].float() if logits else None  # [V]
        self.forwards += 1

    def call(self, input_ids: torch.Tensor, **kwargs):
        """The model's forward over this cache, under `kernel` where one is set. The kernel is
        switched on the shared model's config for this call only, under `KERNEL_SWITCH`, so two
        threads never switch one config at once."""
        config = self.model.config
        if self.kernel is None:
            return self.model(input_ids=input_ids, cache=self.cache, use_cache=True, **kwargs)
        with KERNEL_SWITCH:  # one switch of a model's kernel at a time (the batched decode's too)
            if config._attn_implementation != "sdpa":
                return self.model(input_ids=input_ids, cache=self.cache, use_cache=True, **kwargs)
            config._attn_implementation = self.kernel
            try:
                return self.model(input_ids=input_ids, cache=self.cache, use_cache=True, **kwargs)
            finally:
                config._attn_implementation = "sdpa"

    def reset(self) -> None:
        if self.recorder is not None:
            self.recorder.append(Reset())
        self.release()
        self.cache = new_cache()
        self.logits = None

    def prefill(self, ids, logits: bool = True) -> None:
        """One block as one forward (logits=False: no logits kept, see `_forward`)."""
        ids = list(ids)
        if ids:
            self._forward(ids, logits=logits)
            self.tokens_prefilled += len(ids)

    @staticmethod
    def choose(logits: torch.Tensor, draw=None, temperature: float = 1.0) -> int:
        """The token a row of logits [V] picks: greedy, or sampled with a generator seeded by `draw`."""
        if draw is None:
            return int(torch.argmax(logits))
        g = torch.Generator(device="cpu").manual_seed(int(draw))
        probs = torch.softmax(logits.float().cpu() / temperature, dim=-1)
        return int(torch.multinomial(probs, 1, generator=g))

    def decode(self, n: int, draws=None, temperature: float = 1.0, feed_last: bool = True) -> tuple[int, ...]:
        """n tokens, one forward each; greedy, or sampled with one seeded generator per token.
        Every decoded token is fed back, so the cache holds all of them; feed_last=False picks the
        last one without a forward (a draft whose K/V are thrown away: its logits are never read)."""
        if n and self.logits is None:
            raise UnseeError("decode needs logits from a prefill first (prefill a header)")
        out = []
        for i in range(n):
            tok = self.choose(self.logits, None if draws is None else draws[i], temperature)
            out.append(tok)
            if i == n - 1 and not feed_last:
                break
            self._forward([tok], "decode")
            self.tokens_decoded += 1
        return tuple(out)

    def _draft_rows(self, head, decode) -> tuple[list[int], int]:
        """Before a reply with no usable draft: the header alone as one forward (its logits pick
        x_0; its K/V are thrown away, recorded as a draft forward), then `decode` drafts from there.
        Returns (the draft, header tokens computed by a forward of their own)."""
        start = len(self)
        if head:
            self._forward(list(head), "decode")
            self.tokens_decoded += len(head)
        drafted = decode()
        self.crop(start, fresh_storage=False)
        return drafted, len(head)

    def _turn_start(self, head) -> tuple[list[int], int, int, torch.Tensor | None]:
        """(header, its length h, the turn's first position, the row that picks x_0 when h = 0:
        the last row of the forward before the turn; None otherwise, the prefill's row h−1 does)."""
        head = [int(t) for t in head]
        if not head and self.logits is None:
            raise UnseeError("a model turn needs its header (head=) or logits from a forward before it")
        return head, len(head), len(self), None if head else self.logits

    def fixed_point(self, n: int, draws=None, draft=None, exact_rows: bool = True, head=()
                    ) -> tuple[tuple[int, ...], int, int]:
        """F's model turn: the header `head` and a reply of n tokens as one prefill, the reply the
        unique x with x_i = choice(row h+i−1 of the prefill of head ‖ x) (h = len(head); with no
        header, row −1 is the last row of the forward before). Row j of a prefill does not read the
        tokens after position j (checked by `row_independence`), so x_0 is fixed by the context and
        the header, x_1 by x_0, ….

        Start from `draft` (a recorded reply) or, without one, forward the header alone and decode
        a draft token by token (those K/V thrown away, the last token picked without a forward);
        prefill head ‖ draft as one block and compare every row's choice with the draft; at the
        first disagreement k take the row's choice, re-draft the rest by decoding, and prefill
        again. Each pass fixes at least one more token. The turn's K/V are the last prefill's.
        Returns (reply, tokens computed by forwards of their own: the drafting, prefill passes).
        Every pass counts its reply tokens in `tokens_verified`, and a pass after the first its
        header tokens too (the first pass's header is the turn's prompt).

        exact_rows=False (a backend where rows read later tokens: no fixed point need exist):
        the reply is the decoded draft, its K/V one prefill of head ‖ draft; no recorded draft is used."""
        head, h, start, last = self._turn_start(head)
        decoded = 0
        if draft is None or len(draft) != n or not exact_rows:
            draft, decoded = self._draft_rows(head, lambda: self.decode(n, draws, feed_last=False))
            decoded += n - 1
        draft = [int(t) for t in draft]
        if not exact_rows:
            self.prefill_logits(head + draft)
            self.tokens_verified += n
            return tuple(draft), decoded, 1
        for passes in range(1, n + 2):
            t0 = time.perf_counter()
            block = self.prefill_logits(head + draft)  # [h + n, V]: row h+i−1 picks x_i
            self.verify_seconds += time.perf_counter() - t0
            self.tokens_verified += n + (h if passes > 1 else 0)
            row = (lambda i: last if h + i == 0 else block[h + i - 1])
            k = next((i for i in range(n) if self.choose(row(i), None if draws is None else draws[i]) != draft[i]),
                     None)
            if k is None:
                return tuple(draft), decoded, passes
            self.crop(start + h + k, fresh_storage=False)  # rows before k never read x_k or later: they stay as they are
            self.logits = row(k)
            draft = draft[:k] + list(self.decode(n - k, None if draws is None else draws[k:], feed_last=False))
            decoded += n - k - 1
            self.crop(start, fresh_storage=False)
        raise ExactnessError(f"no fixed point after {n + 1} prefills of a {n}-token reply: this backend "
                             "breaks row independence (see row_independence)")

    def choose_under(self, logits: torch.Tensor, mask: torch.Tensor, draw=None) -> int:
        """`choose` among the tokens a grammar allows (mask: bool [V]); the mask is part of the choice."""
        return self.choose(logits.masked_fill(~mask.to(logits.device), float("-inf")), draw)

    def decode_under(self, n: int, draws, matcher, end: int) -> list[int]:
        """At most n tokens under `matcher`, from the current logits, stopping after `end`. Each
        token but the last is fed back (one decode forward each, counted in `tokens_decoded`); the
        last one needs no forward: its row is the reply's prefill's to compute."""
        out: list[int] = []
        for i in range(n):
            tok = self.choose_under(self.logits, matcher.mask(), None if draws is None else draws[i])
            out.append(tok)
            matcher.consume(tok)
            if tok == end or len(out) == n:
                break
            self._forward([tok], "decode")
            self.tokens_decoded += 1
        return out

    def fixed_point_under(self, n: int, draws, draft, grammar, exact_rows: bool = True, head=()
                          ) -> tuple[tuple[int, ...], int, int]:
        """`fixed_point` for a reply under a grammar (a tool call's JSON arguments): x_i is the
        choice of row h+i−1 among the tokens the grammar allows after x_0..x_{i−1}, and the reply
        ends with the grammar's end token or at n tokens. The mask depends only on the tokens
        before i, so the reply is still fixed token by token; the check walks a matcher along the
        draft. Returns (reply, tokens computed by forwards of their own, prefill passes)."""
        (head, h, start, last), end = self._turn_start(head), grammar.end
        decoded = 0
        if draft is None or not exact_rows or not 0 < len(draft) <= n:
            draft, decoded = self._draft_rows(head, lambda: self.decode_under(n, draws, grammar.matcher(), end))
            decoded += len(draft) - 1
        draft = [int(t) for t in draft]
        if not exact_rows:
            self.prefill_logits(head + draft)
            self.tokens_verified += len(draft)
            return tuple(draft), decoded, 1
        for passes in range(1, n + 2):
            t0 = time.perf_counter()
            block = self.prefill_logits(head + draft)  # [h + len, V]: row h+i−1 picks x_i
            self.verify_seconds += time.perf_counter() - t0
            self.tokens_verified += len(draft) + (h if passes > 1 else 0)
            row = (lambda i: last if h + i == 0 else block[h + i - 1])
            m, k = grammar.matcher(), None
            for i, tok in enumerate(draft):
                if self.choose_under(row(i), m.mask(), None if draws is None else draws[i]) != tok:
                    k = i
                    break
                m.consume(tok)
            if k is None and len(draft) < n and draft[-1] != end:
                k = len(draft)  # a draft that stops short: the row after it chooses what follows
            if k is None:
                return tuple(draft), decoded, passes
            self.crop(start + h + k, fresh_storage=False)
            self.logits = row(k)
            rest = self.decode_under(n - k, None if draws is None else draws[k:], m, end)
            draft = draft[:k] + rest
            decoded += len(rest) - 1
            self.crop(start, fresh_storage=False)
        raise ExactnessError(f"no fixed point after {n + 1} prefills of a constrained reply: this backend "
                             "breaks row independence (see row_independence)")

    @torch.inference_mode()
    def prefill_logits(self, ids) -> torch.Tensor:
        """One forward over a block, returning the logits at every position: [S, V]."""
        if self.recorder is not None:
            self.recorder.append(Forward("prefill", len(self), len(ids)))
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
        out = self.call(input_ids)
        self.forwards += 1
        self.tokens_prefilled += len(ids)
        self.logits = out.logits[0, -1].float()
        return out.logits[0].float()

    def append_rows(self, source: DynamicCache, start: int, end: int) -> None:
        """Reuse positions [start, end) of another cache (a prefix-cache hit): no compute."""
        if self.recorder is not None:
            self.recorder.append(Append("rows", len(self), end - start))
        with torch.inference_mode():
            for layer, src in zip(self.cache.layers, source.layers):
                layer.update(src.keys[..., start:end, :], src.values[..., start:end, :])  # copied in place
        self.logits = None

    def rows(self, start: int, end: int) -> torch.Tensor:
        """A copy of positions [start, end) of every layer: [layers, 2, kv_heads, n, head_dim]."""
        layers = self.kv_tensors()
        k0 = layers[0][0]
        if start < 0:
            raise UnseeError(f"rows from position {start}")
        end = min(end, k0.shape[-2])  # positions past the cache are not there (a page of fewer rows)
        start = min(start, end)
        with torch.inference_mode():  # one copy of each row, into storage of its own
            out = k0.new_empty((len(layers), 2, k0.shape[1], end - start, k0.shape[3]))
            for i, (k, v) in enumerate(layers):
                out[i, 0] = k[0, :, start:end, :]
                out[i, 1] = v[0, :, start:end, :]
            return out

    def append_pages(self, pages, rows: int | None = None) -> int:
        """Append K/V pages (as `rows` returns them) after the resident positions: no compute.

        `pages` may be an iterator: each page is copied into the cache and dropped before the next
        is read, so a restore holds one page besides the cache, not all of them. `rows` (at least
        the rows the pages hold; by default their sum, which needs a list) sizes the one
        allocation, with room for a suffix of a quarter as many. Returns the rows appended."""
        start = len(self)
        if rows is None:
            pages = list(pages)
            rows = sum(p.shape[3] for p in pages)
        n = 0
        with torch.inference_mode():
            total = start + rows
            for layer in self.cache.layers:  # one allocation, not one per page
                if isinstance(layer, RowsLayer):
                    layer.reserve(total + total // 4)
            for page in pages:  # [L, 2, h, n, d]
                page = page.to(self.device)
                for i, layer in enumerate(self.cache.layers):
                    layer.update(page[i, 0].unsqueeze(0), page[i, 1].unsqueeze(0))  # copied in place
                n += page.shape[3]
                del page  # released before the iterator reads the next page
        if self.recorder is not None:
            self.recorder.append(Append("pages", start, n))
        self.logits = None
        return n

    def crop(self, length: int, fresh_storage: bool = True) -> None:
        """Keep the first `length` positions; overwrite the dropped K/V bytes with zeros.

        A `RowsLayer` zeroes the dropped rows inside its buffer and keeps the rest where they are
        (unless the buffer would hold over four times the rows kept: then as below). Any other
        layer: fresh_storage copies the kept rows out, so no dropped byte sits behind them; False
        keeps them a view of the same storage."""
        n = len(self)
        if length > n:
            raise UnseeError(f"cannot crop a cache of {n} positions to {length}")
        if self.recorder is not None:
            self.recorder.append(Crop(length))
        if length == n:
            return
        for layer in self.cache.layers:
            if not layer.is_initialized or layer.keys is None or layer.keys.numel() == 0:
                continue
            with torch.inference_mode():
                if isinstance(layer, RowsLayer) and layer.keep(length):
                    continue  # zeroed in place: the buffer holds no dropped byte, the kept rows stay put
                layer.keys[..., length:, :].zero_()
                layer.values[..., length:, :].zero_()
                layer.keys = layer.keys[..., :length, :]
                layer.values = layer.values[..., :length, :]
                if fresh_storage:
                    layer.keys, layer.values = layer.keys.clone(), layer.values.clone()
                    if isinstance(layer, RowsLayer):
                        layer.wipe()  # the kept rows' old copy too
        self.logits = None

    def select(self, positions) -> None:
        """Keep only the given positions (used by the span-excision mutants)."""
        idx = torch.tensor(list(positions), dtype=torch.long, device=self.device)
        with torch.inference_mode():
            for layer in self.cache.layers:
                if layer.is_initialized and layer.keys is not None and layer.keys.numel():
                    layer.keys = layer.keys.index_select(-2, idx).clone()
                    layer.values = layer.values.index_select(-2, idx).clone()
                    if isinstance(layer, RowsLayer):
                        layer.wipe()
        self.logits = None

    def release(self) -> None:
        """Overwrite every K/V byte before dropping the cache."""
        for layer in self.cache.layers:
            with torch.inference_mode():
                if layer.is_initialized and layer.keys is not None:
                    layer.keys.zero_()
                    layer.values.zero_()
                if isinstance(layer, RowsLayer):
                    layer.wipe()

    def clone(self) -> "KVEngine":
        """A branch with its own cache over the same model (for paired comparisons)."""
        other = KVEngine.__new__(KVEngine)
        other.__dict__.update(self.__dict__)
        other.recorder = None  # a branch's events are not this cache's
        other.cache = copy.deepcopy(self.cache)
        other.logits = None if self.logits is None else self.logits.clone()
        return other

    def kv_tensors(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(layer.keys, layer.values) for layer in self.cache.layers
                if layer.is_initialized and layer.keys is not None]

    @torch.inference_mode()
    def probe(self, ids) -> torch.Tensor:
        """Next-token logits after `ids`, on a throwaway copy of the cache."""
        branch = self.clone()
        branch._forward(list(ids))
        logits = branch.logits.clone()
        branch.release()
        return logits


def tensor_digest(tensors) -> str:
    """sha256 over each tensor's shape and its bytes in row-major order (the bytes of
    `t.contiguous()`), read in place: a cache layer is a view of a larger buffer, whose
    contiguous pieces are hashed one after another instead of copying the layer out."""
    h = hashlib.sha256()
    for t in tensors:
        h.update(str(tuple(t.shape)).encode())
        for piece in _contiguous_pieces(t.detach().to("cpu")):
            h.update(piece.reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()[:16]


def _contiguous_pieces(t: torch.Tensor):
    """`t` as contiguous sub-tensors whose bytes, in order, are `t.contiguous()`'s."""
    if t.is_contiguous() or t.dim() <= 1:
        yield t.contiguous()  # a copy only for a strided vector
        return
    for sub in t:
        yield from _contiguous_pieces(sub)
