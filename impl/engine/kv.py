"""KVEngine: prefill, decode, crop and clone over a transformers causal LM, with counters.

The engine runs the canonical schedule that defines F's bits (README: "bit-exact"): one
forward per prompt block; a model turn's header, then its reply as one prefill, the reply
being the fixed point of that prefill's choices (`KVEngine.fixed_point`); batch size 1, a
pinned thread count, deterministic algorithms. `TorchLM` puts it behind the LM interface that the shared
scaffold (`unsee.model.state.step`) calls, so the agent semantics and the provenance graph
are the reference's, and only θ differs.
"""

from __future__ import annotations

import contextvars
import copy
import hashlib
import os
import time
from dataclasses import dataclass

import torch
from transformers import AttentionInterface, DynamicCache

from unsee.impl.engine.pages import ROOT, PageKeys, page_layout
from unsee.model.session import UnseeError
from unsee.specs.traces import Append, Begin, Commit, Crop, Forward, RebuildBegin, RebuildEnd, Reset, StepEnd


class ExactnessError(UnseeError, ValueError):
    """A configuration that would silently break bit-exactness."""


def pin_determinism(device: torch.device, threads: int) -> None:
    """Same bits every run: one thread count, deterministic kernels (CUDA needs the
    cuBLAS workspace setting before its first call)."""
    torch.set_num_threads(threads)
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = False
        torch.use_deterministic_algorithms(True)


def check_exact_config(model) -> None:
    cfg = model.config
    impl = getattr(cfg, "_attn_implementation", None) or "eager"
    if impl not in ("eager", "sdpa"):
        raise ExactnessError(f"attention implementation {impl!r} is not deterministic here; load with "
                             "attn_implementation='eager' or 'sdpa'")
    if model.training:
        raise ExactnessError("the model is in training mode (dropout); call model.eval()")
    # Sliding-window layers: the engine's plain DynamicCache keeps every position, so a crop
    # never needs positions that a sliding cache would have dropped.


class KVEngine:
    """One session's cache over a shared model. Counts forwards and tokens.

    `recorder`: None, or a list the engine appends its events to (`unsee.specs.traces`:
    Forward, Crop, Reset, Append), in order, as it runs; `TorchLM.record_events` sets it.
    Recording reads no tensor and changes no computation."""

    def __init__(self, model, device: torch.device, threads: int = 1) -> None:
        check_exact_config(model)
        self.model = model
        self.device = device
        self.threads = threads
        pin_determinism(device, threads)
        self.cache = DynamicCache()
        self.logits: torch.Tensor | None = None  # [V] after the last forward
        self.forwards = 0
        self.tokens_prefilled = 0
        self.tokens_decoded = 0
        self.verify_seconds = 0.0  # prefills that check a reply's fixed point (reported, never asserted)
        self.recorder: list | None = None

    def __len__(self) -> int:
        return self.cache.get_seq_length()

    @torch.inference_mode()
    def _forward(self, ids: list[int], kind: str = "prefill") -> None:
        if self.recorder is not None:
            self.recorder.append(Forward(kind, len(self), len(ids)))
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)  # [1, S]
        out = self.model(input_ids=input_ids, cache=self.cache, use_cache=True)
        self.logits = out.logits[0, -1].float()  # [V]
        self.forwards += 1

    def reset(self) -> None:
        if self.recorder is not None:
            self.recorder.append(Reset())
        self.release()
        self.cache = DynamicCache()
        self.logits = None

    def prefill(self, ids) -> None:
        """One block as one forward."""
        ids = list(ids)
        if ids:
            self._forward(ids)
            self.tokens_prefilled += len(ids)

    @staticmethod
    def choose(logits: torch.Tensor, draw=None, temperature: float = 1.0) -> int:
        """The token a row of logits [V] picks: greedy, or sampled with a generator seeded by `draw`."""
        if draw is None:
            return int(torch.argmax(logits))
        g = torch.Generator(device="cpu").manual_seed(int(draw))
        probs = torch.softmax(logits.float().cpu() / temperature, dim=-1)
        return int(torch.multinomial(probs, 1, generator=g))

    def decode(self, n: int, draws=None, temperature: float = 1.0) -> tuple[int, ...]:
        """n tokens, one forward each; greedy, or sampled with one seeded generator per token.
        Every decoded token is fed back, so the cache holds all of them."""
        if n and self.logits is None:
            raise UnseeError("decode needs logits from a prefill first (prefill a header)")
        out = []
        for i in range(n):
            tok = self.choose(self.logits, None if draws is None else draws[i], temperature)
            out.append(tok)
            self._forward([tok], "decode")
            self.tokens_decoded += 1
        return tuple(out)

    @torch.inference_mode()
    def decode_rows(self, prompts, n: int, draws=None, temperature: float = 1.0, max_bytes: int = 1 << 30):
        """Many replies after this cache as one batch: row r prefills `prompts[r]` and decodes n
        tokens, greedy or sampled with `draws[r]` (None or n draws), as `decode` does on a copy.
        This cache is left as it was.

        Each distinct prompt is prefilled once, at batch size 1 and on the same cache, so its
        next-token logits are `probe`'s bit for bit. Then every row is decoded together, one
        forward of batch size B per token. The rows share this cache's c tokens, so the batch
        keeps them once: each step's attention reads the shared keys and values once for all
        rows (`shared_prefix_attention`) and each row's own prompt and decoded tokens from a
        small per-row buffer, with a padding mask there (rows' prompts differ in length). These
        forwards have another shape than B separate ones, so their bits may differ from a
        one-at-a-time decode; two bit-identical caches give bit-identical rows under the same
        prompts and draws. Rows go in batches whose per-row buffers stay under `max_bytes`.
        The model's attention kernel is switched for the batch and restored after it, so one
        model runs one batched decode at a time (engines share a model within a thread).
        Returns (tokens per row, {prompt tuple: next-token logits [V] after it})."""
        prompts = [tuple(int(t) for t in p) for p in prompts]
        draws = [None] * len(prompts) if draws is None else list(draws)
        if len(draws) != len(prompts):
            raise UnseeError(f"decode_rows: {len(prompts)} prompts but {len(draws)} draw lists")
        if not prompts:
            return [], {}
        work = self.clone()
        c = len(work)
        first, tails = {}, {}
        for p in dict.fromkeys(prompts):
            if not p:
                if self.logits is None:
                    raise UnseeError("decode needs logits from a prefill first (prefill a header)")
                first[p], tails[p] = self.logits.clone(), None
                continue
            work._forward(list(p))
            first[p] = work.logits.clone()
            tails[p] = [(k[..., c:, :].clone(), v[..., c:, :].clone()) for k, v in work.kv_tensors()]
            work.crop(c, fresh_storage=False)
        if n == 0:
            work.release()
            return [() for _ in prompts], first
        check_shared_prefix(self.model)
        layers = [layer for layer in work.cache.layers
                  if getattr(layer, "is_initialized", False) and layer.keys is not None]
        context = [(layer.keys[..., :c, :], layer.values[..., :c, :]) for layer in layers]
        width = max(len(p) for p in prompts)
        per_row = sum(2 * k.shape[1] * k.shape[3] * k.element_size() for k, _ in context) * (width + n)
        size = max(1, min(len(prompts), max_bytes // max(per_row, 1)))  # rows per batch: a function of the
        out: list = []  # prompts only, so two equal caches batch the same way
        try:
            for lo in range(0, len(prompts), size):
                out += self._decode_batch(work, layers, context, c, prompts[lo:lo + size], draws[lo:lo + size],
                                          tails, first, n, temperature)
        finally:  # on an error too: the prompts' rows are zeroed and the copy released
            for layer, kv in zip(layers, context):
                layer.keys, layer.values = kv
            for tail in tails.values():
                for k, v in tail or ():
                    k.zero_()
                    v.zero_()
            work.release()
        return out, first

    def _decode_batch(self, work, layers, context, c, prompts, draws, tails, first, n, temperature):
        """`decode_rows` for one batch of rows: `work`'s cache layers hold the rows' own tokens
        (prompt, padding, decoded) while the shared context stays in `context`, once."""
        b, width = len(prompts), max(len(p) for p in prompts)
        lengths = torch.tensor([len(p) for p in prompts], device=self.device)
        buffers = []
        model, config = self.model, self.model.config
        impl = config._attn_implementation
        index = {id(layer): i for i, layer in enumerate(work.cache.layers)}  # the model's layer_idx
        token = _SHARED_PREFIX.set({index[id(layer)]: kv for layer, kv in zip(layers, context)})
        try:
            for i, layer in enumerate(layers):
                batched = []
                for t in context[i]:  # room for the n − 1 decode forwards: each writes its row in place
                    batched.append(t.new_zeros((b, t.shape[1], width + n - 1, t.shape[3])))
                for r, p in enumerate(prompts):
                    if tails[p] is not None:
                        batched[0][r, :, :len(p)] = tails[p][i][0][0]
                        batched[1][r, :, :len(p)] = tails[p][i][1][0]
                buffers.append(batched)
                layer.keys, layer.values = batched[0][:, :, :width], batched[1][:, :, :width]
                layer.update = _InPlace(layer, *batched)  # instead of growing the batch's cache by concatenation
            # [B, 1, 1, w + n − 1]: a row attends to its prompt and to every decoded token (4-D, so the
            # model passes it through as it is; the shared context needs no mask)
            span = torch.arange(width + n - 1, device=self.device)[None, :]
            mask = ((span < lengths[:, None]) | (span >= width))[:, None, None, :]
            positions = (c + lengths)[:, None]  # [B, 1]: where each row's first decoded token sits
            logits = torch.stack([first[p] for p in prompts])  # [B, V]
            out: list[list[int]] = [[] for _ in prompts]
            config._attn_implementation = SHARED_PREFIX
            for j in range(n):
                for r in range(b):
                    out[r].append(self.choose(logits[r], None if draws[r] is None else draws[r][j], temperature))
                if j == n - 1:
                    break  # the last token's logits are never read
                ids = torch.tensor([[row[-1]] for row in out], dtype=torch.long, device=self.device)
                res = model(input_ids=ids, attention_mask=mask[..., :width + j + 1], position_ids=positions + j,
                            cache=work.cache, use_cache=True)
                logits = res.logits[:, -1].float()
                work.forwards += 1
        finally:  # on an error too: the kernel restored, no layer keeps the in-place update, no buffer its rows
            config._attn_implementation = impl
            _SHARED_PREFIX.reset(token)
            for layer, (k, v) in zip(layers, buffers):
                layer.__dict__.pop("update", None)
                k.zero_()
                v.zero_()
        return [tuple(row) for row in out]

    def fixed_point(self, n: int, draws=None, draft=None, exact_rows: bool = True) -> tuple[tuple[int, ...], int, int]:
        """F's reply of n tokens: the unique x with x_i = choice(row i−1 of the n-token prefill
        of x) (row −1: the header's last row). Row i of a prefill does not read the tokens after
        position i (checked by `row_independence`), so x_0 is fixed by the context, x_1 by x_0, ….

        Start from `draft` (a recorded reply) or, without one, decode a draft token by token
        (its K/V thrown away); prefill the draft as one block and compare every row's choice
        with it; at the first disagreement k take the row's choice, re-draft the rest by
        decoding, and prefill again. Each pass fixes at least one more token. The reply's K/V
        are the last prefill's. Returns (reply, tokens decoded, prefill passes).

        exact_rows=False (a backend where rows read later tokens: no fixed point need exist):
        the reply is the decoded draft, its K/V one prefill of it; no recorded draft is used."""
        if self.logits is None:
            raise UnseeError("decode needs logits from a prefill first (prefill a header)")
        start, head = len(self), self.logits  # head: [V], the row that picks x_0
        decoded = 0
        if draft is None or len(draft) != n or not exact_rows:
            draft = self.decode(n, draws)
            decoded += n
            self.crop(start, fresh_storage=False)
        draft = [int(t) for t in draft]
        if not exact_rows:
            self.prefill_logits(draft)
            return tuple(draft), decoded, 1
        for passes in range(1, n + 2):
            t0 = time.perf_counter()
            block = self.prefill_logits(draft)  # [n, V]: row i picks x_{i+1}
            self.verify_seconds += time.perf_counter() - t0
            k = next((i for i in range(n) if self.choose(head if i == 0 else block[i - 1],
                                                          None if draws is None else draws[i]) != draft[i]), None)
            if k is None:
                return tuple(draft), decoded, passes
            self.crop(start + k, fresh_storage=False)  # rows before k never read x_k or later: they stay as they are
            self.logits = head if k == 0 else block[k - 1]
            draft = draft[:k] + list(self.decode(n - k, None if draws is None else draws[k:]))
            decoded += n - k
            self.crop(start, fresh_storage=False)
        raise ExactnessError(f"no fixed point after {n + 1} prefills of a {n}-token reply: this backend "
                             "breaks row independence (see row_independence)")

    @torch.inference_mode()
    def prefill_logits(self, ids) -> torch.Tensor:
        """One forward over a block, returning the logits at every position: [S, V]."""
        if self.recorder is not None:
            self.recorder.append(Forward("prefill", len(self), len(ids)))
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
        out = self.model(input_ids=input_ids, cache=self.cache, use_cache=True)
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
                layer.keys = torch.cat([layer.keys, src.keys[..., start:end, :]], dim=-2)
                layer.values = torch.cat([layer.values, src.values[..., start:end, :]], dim=-2)
        self.logits = None

    def rows(self, start: int, end: int) -> torch.Tensor:
        """A copy of positions [start, end) of every layer: [layers, 2, kv_heads, n, head_dim]."""
        with torch.inference_mode():
            return torch.stack([torch.stack((k[0, :, start:end, :], v[0, :, start:end, :]))
                                for k, v in self.kv_tensors()]).clone()

    def append_pages(self, pages) -> None:
        """Append K/V pages (as `rows` returns them) after the resident positions: no compute."""
        if self.recorder is not None:
            self.recorder.append(Append("pages", len(self), sum(p.shape[3] for p in pages)))
        with torch.inference_mode():
            block = torch.cat([p.to(self.device) for p in pages], dim=3)  # [L, 2, h, n, d]
            for i, layer in enumerate(self.cache.layers):
                layer.keys = torch.cat([layer.keys, block[i, 0].unsqueeze(0)], dim=-2)
                layer.values = torch.cat([layer.values, block[i, 1].unsqueeze(0)], dim=-2)
        self.logits = None

    def crop(self, length: int, fresh_storage: bool = True) -> None:
        """Keep the first `length` positions; overwrite the dropped K/V bytes with zeros.

        fresh_storage: copy the kept rows out, so no dropped byte sits behind them (a restore);
        False keeps them a view of the same storage, for the passes of one reply's fixed point,
        which would otherwise copy the whole cache each time (the next update concatenates into
        fresh storage anyway)."""
        n = len(self)
        if length > n:
            raise UnseeError(f"cannot crop a cache of {n} positions to {length}")
        if self.recorder is not None:
            self.recorder.append(Crop(length))
        if length == n:
            return
        for layer in self.cache.layers:
            if not getattr(layer, "is_initialized", False) or layer.keys is None or layer.keys.numel() == 0:
                continue
            with torch.inference_mode():
                layer.keys[..., length:, :].zero_()
                layer.values[..., length:, :].zero_()
                layer.keys = layer.keys[..., :length, :]
                layer.values = layer.values[..., :length, :]
                if fresh_storage:
                    layer.keys, layer.values = layer.keys.clone(), layer.values.clone()
        self.logits = None

    def select(self, positions) -> None:
        """Keep only the given positions (used by the span-excision mutants)."""
        idx = torch.tensor(list(positions), dtype=torch.long, device=self.device)
        with torch.inference_mode():
            for layer in self.cache.layers:
                if getattr(layer, "is_initialized", False) and layer.keys is not None and layer.keys.numel():
                    layer.keys = layer.keys.index_select(-2, idx).clone()
                    layer.values = layer.values.index_select(-2, idx).clone()
        self.logits = None

    def release(self) -> None:
        """Overwrite every K/V byte before dropping the cache."""
        for layer in getattr(self.cache, "layers", []):
            if getattr(layer, "is_initialized", False) and layer.keys is not None:
                with torch.inference_mode():
                    layer.keys.zero_()
                    layer.values.zero_()

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
                if getattr(layer, "is_initialized", False) and layer.keys is not None]

    @torch.inference_mode()
    def probe(self, ids) -> torch.Tensor:
        """Next-token logits after `ids`, on a throwaway copy of the cache."""
        branch = self.clone()
        branch._forward(list(ids))
        logits = branch.logits.clone()
        branch.release()
        return logits


def tensor_digest(tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(str(tuple(t.shape)).encode())
        h.update(t.detach().to("cpu").contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


_ROWS_CHECKED: dict = {}


def row_independence(engine: KVEngine, context: int = 24, block: int = 16) -> tuple[bool, str]:
    """Does row i of a prefill (its logits and K/V) ignore the tokens after position i, bit for
    bit, on this model, dtype, device, attention implementation and thread count? The fixed
    point that defines a reply is unique only if it does. Two blocks that agree on their first
    half are prefilled after the same context and their first halves compared with torch.equal.
    Cached per configuration. Returns (holds, a sentence for the user)."""
    model = engine.model
    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    key = (id(model), str(next(model.parameters()).dtype), str(engine.device), engine.threads, impl)
    if key in _ROWS_CHECKED:
        return _ROWS_CHECKED[key]
    g = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    ctx = torch.randint(10, vocab, (context,), generator=g).tolist()
    a = torch.randint(10, vocab, (block,), generator=g).tolist()
    b = a[: block // 2] + torch.randint(10, vocab, (block - block // 2,), generator=g).tolist()
    e1 = KVEngine(model, engine.device, engine.threads)
    e1.prefill(ctx)
    e2 = e1.clone()
    la, lb = e1.prefill_logits(a), e2.prefill_logits(b)
    half = context + block // 2  # the shared context and the blocks' common first half
    holds = torch.equal(la[: block // 2], lb[: block // 2]) and all(
        torch.equal(x[..., :half, :], y[..., :half, :])
        for p, q in zip(e1.kv_tensors(), e2.kv_tensors()) for x, y in zip(p, q))
    e1.release()
    e2.release()
    note = ("row independence holds: a recorded reply is checked by one prefill" if holds else
            f"row independence does not hold on this backend ({impl}, {key[1]}, {key[2]}, {engine.threads} "
            "threads): replies are drafted by decoding and verified by prefill, and no recorded reply "
            "is reused (skipping refused)")
    _ROWS_CHECKED[key] = (holds, note)
    return holds, note


SHARED_PREFIX = "unsee_shared_prefix"
_SHARED_PREFIX: contextvars.ContextVar = contextvars.ContextVar("unsee_shared_prefix")


def shared_prefix_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """Attention for `decode_rows`: B rows that share one context of c positions.

    query [B, H, q, D]; key, value [B, Hkv, S, D]: each row's own positions (prompt, padding,
    decoded tokens); attention_mask [B, 1, q or 1, S], True where a row attends. The shared
    context's keys and values, [1, Hkv, c, D], come from the batch (`_SHARED_PREFIX`, by layer)
    and are read once for every row: the rows' queries of one key head are the rows of one
    matmul against them. Scores of both parts go through one softmax (in float32, as eager
    attention does), so the result is attention over the c + S positions. Query head h reads
    key head h // (H / Hkv), as `repeat_kv` pairs them."""
    kp, vp = _SHARED_PREFIX.get()[module.layer_idx]
    b, h, q, d = query.shape
    hkv, s, c = key.shape[1], key.shape[2], kp.shape[2]
    rows = h // hkv * q
    scale = d ** -0.5 if scaling is None else scaling
    qg = query.reshape(b, hkv, rows, d)  # [B, Hkv, g·q, D]
    shared = torch.matmul(qg.transpose(0, 1).reshape(hkv, b * rows, d), kp[0].transpose(-1, -2))  # [Hkv, B·g·q, c]
    shared = shared.reshape(hkv, b, rows, c).transpose(0, 1)
    own = torch.matmul(qg, key.transpose(-1, -2))  # [B, Hkv, g·q, S]
    if attention_mask is not None:
        allowed = attention_mask.bool().expand(b, 1, -1, s)  # [B, 1, q or 1, S]; row g·q + i is query i
        own = own.masked_fill(~(allowed.repeat(1, 1, h // hkv, 1) if allowed.shape[2] > 1 else allowed), float("-inf"))
    probs = torch.softmax(torch.cat([shared, own], dim=-1).float() * scale, dim=-1).to(query.dtype)
    out = torch.matmul(probs[..., :c].transpose(0, 1).reshape(hkv, b * rows, c), vp[0])
    out = out.reshape(hkv, b, rows, d).transpose(0, 1) + torch.matmul(probs[..., c:], value)
    return out.reshape(b, h, q, d).transpose(1, 2).contiguous(), None


AttentionInterface.register(SHARED_PREFIX, shared_prefix_attention)


def check_shared_prefix(model) -> None:
    """`decode_rows` attends to every position of the shared context: a model whose layers
    mask it otherwise (sliding windows) or reshape scores (soft-capping) needs another kernel."""
    cfg = model.config
    kinds = set(getattr(cfg, "layer_types", None) or ["full_attention"])
    sliding = getattr(cfg, "use_sliding_window", False) and getattr(cfg, "sliding_window", None)
    if kinds != {"full_attention"} or sliding or getattr(cfg, "attn_logit_softcapping", None):
        raise ExactnessError(f"decode_rows: {cfg.model_type} has attention other than full attention "
                             f"({sorted(kinds)}, sliding window {sliding or None}); the batched decode supports full attention only")


class _InPlace:
    """A cache layer's `update` for a batched decode: the new rows go into the layer's
    preallocated buffers, and the layer's keys and values become views one row longer (what
    concatenating would give, without copying the whole batch's cache at every token)."""

    def __init__(self, layer, keys: torch.Tensor, values: torch.Tensor) -> None:
        self.layer, self.keys, self.values = layer, keys, values

    def __call__(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        layer, n = self.layer, self.layer.keys.shape[-2]
        m = n + key_states.shape[-2]
        if m > self.keys.shape[-2]:
            raise UnseeError(f"batched decode: the cache buffer holds {self.keys.shape[-2]} rows, {m} asked for")
        self.keys[:, :, n:m] = key_states
        self.values[:, :, n:m] = value_states
        layer.keys, layer.values = self.keys[:, :, :m], self.values[:, :, :m]
        return layer.keys, layer.values


@dataclass(frozen=True)
class KVRef:
    """The cache a state refers to: its length in context tokens and the engine epoch
    (bumped whenever the cache is rebuilt). Only the live state's ref is resident."""

    length: int
    epoch: int


class TorchLM:
    """The LM interface of `unsee.model.state` over a KVEngine and a chat template."""

    def __init__(self, bundle, device: torch.device | None = None, threads: int = 1) -> None:
        self.bundle = bundle
        self.name = bundle.name
        self.template = bundle.template
        self.engine = KVEngine(bundle.model, device or bundle.device, threads)
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
        self.chain: list[tuple[object, str]] = []  # (block, key) of the resident context, in order
        self.capture_seconds = 0.0  # time spent slicing pages out of the cache (page-write overhead)
        self.passes = 0  # fixed-point prefills of replies
        self.drafts_ok, self.drafts_note = row_independence(self.engine)

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
        return other

    # -- tokens ---------------------------------------------------------------------------
    def encode(self, kind: str, text: str) -> tuple[int, ...]:
        return tuple(self.template.block(kind, text))

    def header(self, purpose: str) -> tuple[int, ...]:
        return tuple(self.template.header(purpose))

    # -- the cache --------------------------------------------------------------------------
    def _live(self, kv: KVRef) -> None:
        if kv.epoch != self.epoch or kv.length + len(self.bos) != len(self.engine):
            raise UnseeError(f"cache handle {kv} is not resident (engine epoch {self.epoch}, "
                             f"length {len(self.engine)}); restore it from a checkpoint first")

    def resident(self, kv) -> bool:
        return isinstance(kv, KVRef) and kv.epoch == self.epoch and kv.length + len(self.bos) == len(self.engine)

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
        n, b = len(self.ctx), len(self.bos)
        if (reuse and not logits and tokens and list(reuse[0][:n]) == self.ctx
                and list(reuse[0][n:n + len(tokens)]) == tokens):
            # a whole block inside the resident prefix: reuse its rows (same schedule, same bits)
            self.engine.append_rows(reuse[1], b + n, b + n + len(tokens))
            self.hits += len(tokens)
        else:
            self.engine.prefill(tokens)
        self.ctx += tokens
        return self._ref()

    def decode(self, kv: KVRef, n: int, draws, hint=None, trust: bool = False):
        """F's reply (KVEngine.fixed_point), from the recorded `hint` as the draft when the
        backend keeps rows independent. Returns (reply, ref, tokens decoded one per forward).
        `trust` prefills the hint unchecked: the bench's labelled oracle comparison, not exact."""
        self._live(kv)
        if trust and hint is not None and len(hint) == n:
            rec = tuple(int(t) for t in hint)
            self.engine.prefill(rec)
            self.ctx += list(rec)
            return rec, self._ref(), 0
        if n == 0:
            return (), self._ref(), 0
        out, decoded, passes = self.engine.fixed_point(n, draws, hint, exact_rows=self.drafts_ok)
        self.passes += passes
        self.ctx += list(out)
        return out, self._ref(), decoded

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
        on the canonical schedule (each block's prompt as one forward, a model turn's header and
        reply as one forward each)."""
        tokens = list(tokens)
        log = self.engine.recorder
        if log is not None:
            log.append(RebuildBegin())
        keys = self.keys.keys(tokens, blocks)
        keep = 0
        while keep < min(len(keys), len(self.chain)) and self.chain[keep][1] == keys[keep]:
            keep += 1
        if keep and len(self.engine) < len(self.bos) + blocks[keep - 1].end:
            keep = 0
        if keep:
            end = blocks[keep - 1].end
            self.engine.crop(len(self.bos) + end)
            self.epoch += 1
        else:
            self.empty()
        pages = []
        while keep + len(pages) < len(blocks) and self.kv_pages:
            page = self.page(keys[keep + len(pages)])
            if page is None:
                break
            pages.append(page)
        if pages:
            self.engine.append_pages(pages)
        computed = 0
        for b in blocks[keep + len(pages):]:  # the canonical schedule: header, then the reply, one prefill each
            self.engine.prefill(tokens[b.start:b.start + b.prefill])
            self.engine.prefill(tokens[b.start + b.prefill:b.end])
            computed += b.end - b.start
        self.ctx = tokens
        self.chain = list(zip(blocks, keys))
        kv = self._ref()
        if log is not None:
            log.append(RebuildEnd(len(tokens)))
        if kv.length != len(tokens):
            raise UnseeError(f"re-materialized {kv.length} positions for {len(tokens)} recorded tokens")
        return kv, computed

    # -- the post-τ-cache mutant (specs.mutants.ReusePostTauCache) ---------------------------
    def snapshot(self, kv: KVRef):
        self._live(kv)
        return [(k.clone(), v.clone()) for k, v in self.engine.kv_tensors()]

    def graft(self, kv: KVRef, old) -> KVRef:
        """Overwrite the first min(len) rows of the resident cache with a snapshot's rows."""
        self._live(kv)
        with torch.inference_mode():
            for layer, (k, v) in zip(self.engine.cache.layers, old):
                n = min(k.shape[-2], layer.keys.shape[-2])
                layer.keys = torch.cat([k[..., :n, :], layer.keys[..., n:, :]], dim=-2)
                layer.values = torch.cat([v[..., :n, :], layer.values[..., n:, :]], dim=-2)
        return kv

    # -- K/V pages ----------------------------------------------------------------------------
    def page(self, key: str) -> torch.Tensor | None:
        if key in self.pages:
            return self.pages[key]
        return None if self.page_source is None else self.page_source(key)

    def after_step(self, state) -> None:
        """Capture the K/V rows of every block of R_t not paged yet (each block once)."""
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
            if key not in self.pages:
                self.pages[key] = self.engine.rows(b + blk.start, b + blk.end)
        self.capture_seconds += time.perf_counter() - t0

    def page_layout(self) -> dict:
        return page_layout(self.engine.rows(0, 1))

    def identity(self) -> dict:
        """Everything besides the log that decides the bits of a state: a store records it and
        every later process must match it (unsee.impl.store.sqlite.identity_of)."""
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
