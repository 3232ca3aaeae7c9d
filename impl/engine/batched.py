"""The audit's batched decode: many replies after one cache as one batch (`decode_rows`).

Not part of F's canonical schedule (batch size 1): the audit reads its probes and Leak@5
samples this way, B rows that share one context, which the attention kernel
`shared_prefix_attention` reads once for all rows. Two bit-identical caches give bit-identical
rows under the same prompts and draws.
"""

from __future__ import annotations

import contextvars

import torch
from transformers import AttentionInterface

from unsee.impl.engine.exact import ExactnessError
from unsee.impl.engine.kv import KERNEL_SWITCH
from unsee.model.errors import UnseeError


@torch.inference_mode()
def decode_rows(engine, prompts, n: int, draws=None, temperature: float = 1.0, max_bytes: int = 1 << 30):
    """Many replies after `engine`'s cache as one batch: row r prefills `prompts[r]` and decodes
    n tokens, greedy or sampled with `draws[r]` (None or n draws), as `KVEngine.decode` does on
    a copy. The engine's cache is left as it was.

    Each distinct prompt is prefilled once, at batch size 1 and on the same cache, so its
    next-token logits are `KVEngine.probe`'s bit for bit. Then every row is decoded together, one
    forward of batch size B per token. The rows share the cache's c tokens, so the batch
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
    work = engine.clone()
    c = len(work)
    first, tails = {}, {}
    for p in dict.fromkeys(prompts):
        if not p:
            if engine.logits is None:
                raise UnseeError("decode needs logits from a prefill first (prefill a header)")
            first[p], tails[p] = engine.logits.clone(), None
            continue
        work._forward(list(p))
        first[p] = work.logits.clone()
        tails[p] = [(k[..., c:, :].clone(), v[..., c:, :].clone()) for k, v in work.kv_tensors()]
        work.crop(c, fresh_storage=False)
    if n == 0:
        work.release()
        return [() for _ in prompts], first
    check_shared_prefix(engine.model)
    layers = [layer for layer in work.cache.layers
              if layer.is_initialized and layer.keys is not None]
    context = [(layer.keys[..., :c, :], layer.values[..., :c, :]) for layer in layers]
    width = max(len(p) for p in prompts)
    per_row = sum(2 * k.shape[1] * k.shape[3] * k.element_size() for k, _ in context) * (width + n)
    size = max(1, min(len(prompts), max_bytes // max(per_row, 1)))  # rows per batch: a function of the
    out: list = []  # prompts only, so two equal caches batch the same way
    try:
        for lo in range(0, len(prompts), size):
            out += _decode_batch(engine, work, layers, context, c, prompts[lo:lo + size], draws[lo:lo + size],
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


def _decode_batch(engine, *args):
    with KERNEL_SWITCH:  # the model's kernel is switched for the batch: one switch at a time
        return _decode_batch_switched(engine, *args)


def _decode_batch_switched(engine, work, layers, context, c, prompts, draws, tails, first, n, temperature):
    """`decode_rows` for one batch of rows: `work`'s cache layers hold the rows' own tokens
    (prompt, padding, decoded) while the shared context stays in `context`, once."""
    b, width = len(prompts), max(len(p) for p in prompts)
    lengths = torch.tensor([len(p) for p in prompts], device=engine.device)
    buffers = []
    model, config = engine.model, engine.model.config
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
        span = torch.arange(width + n - 1, device=engine.device)[None, :]
        mask = ((span < lengths[:, None]) | (span >= width))[:, None, None, :]
        positions = (c + lengths)[:, None]  # [B, 1]: where each row's first decoded token sits
        logits = torch.stack([first[p] for p in prompts])  # [B, V]
        out: list[list[int]] = [[] for _ in prompts]
        config._attn_implementation = SHARED_PREFIX
        for j in range(n):
            for r in range(b):
                out[r].append(engine.choose(logits[r], None if draws[r] is None else draws[r][j], temperature))
            if j == n - 1:
                break  # the last token's logits are never read
            ids = torch.tensor([[row[-1]] for row in out], dtype=torch.long, device=engine.device)
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
    # attributes only some transformers config classes have (layer_types, sliding windows, soft-capping)
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
