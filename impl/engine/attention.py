"""Grouped-query attention without copying the cache, used only where it gives transformers' bits.

On a prefill after the first (a mask, more than one query), transformers' SDPA path copies
every key and value head `num_key_value_groups` times (`repeat_kv`): a copy of the whole
cache, in every layer, at every forward. `gqa_sdpa_attention` hands the cache's heads to
torch's SDPA as they are (`enable_gqa=True`, the call transformers itself makes when there is
no mask); every other case goes to transformers' own function unchanged.

The engine switches to it only on CPU and only where `gqa_kernel` finds it bit-identical to
transformers' kernel (`torch.equal` on the logits and K/V of a probe run through prefills of
several sizes and single-token decodes), for the self-test's key (weights, dtype, device,
threads, versions, CPU flags), the result kept on disk like the row-independence test's. So F's
bits are transformers' SDPA bits and a store still records `attn: sdpa`.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

GQA_SDPA = "unsee_gqa_sdpa"
GQA_VERSION = 1  # bump when `gqa_sdpa_attention` or the probe changes: stored results are then not read


def gqa_sdpa_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                       is_causal=None, **kwargs):
    """transformers' `sdpa_attention_forward`, but a masked multi-query forward of a grouped-query
    layer reads the key and value heads in place instead of repeating them. query [B, H, q, D];
    key, value [B, Hkv, S, D]; query head h reads key head h // (H / Hkv), as `repeat_kv` pairs them."""
    groups = getattr(module, "num_key_value_groups", 1)  # set by grouped-query attention classes only
    if groups == 1 or attention_mask is None or query.shape[2] == 1 or kwargs.get("position_bias") is not None \
            or kwargs.get("softcap") is not None or key.shape[-1] != value.shape[-1]:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                           dropout_p=dropout, scale=scaling, is_causal=False,
                                                           enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(GQA_SDPA, gqa_sdpa_attention)
AttentionMaskInterface.register(GQA_SDPA, sdpa_mask)  # the masks transformers builds for "sdpa"


def grouped(model) -> bool:
    cfg = model.config
    # head counts: names of the Llama-like config classes; other transformers configs may lack them
    heads = getattr(cfg, "num_attention_heads", None)
    return bool(heads) and (getattr(cfg, "num_key_value_heads", None) or heads) < heads


def gqa_kernel(engine) -> str | None:
    """The kernel `engine` runs its forwards under in place of "sdpa" (`GQA_SDPA`), or None: not an
    SDPA model with grouped heads on CPU, or the probe found other bits than transformers' own."""
    from unsee.impl.engine.selftest import read_result, selftest_key, write_result

    model = engine.model
    # a private transformers config attribute: read defensively, as every other reader of it here
    if getattr(model.config, "_attn_implementation", None) != "sdpa" or engine.device.type != "cpu" \
            or not grouped(model):
        return None
    checked = model.__dict__.setdefault("unsee_gqa_checked", {})  # on the model: a freed model's id is reused
    mem = (str(next(model.parameters()).dtype), engine.threads)
    if mem not in checked:
        key = {**selftest_key(engine, "sdpa"), "test": "gqa-sdpa", "version": GQA_VERSION, "probe": list(PROBE)}
        doc = read_result(key, "gqa-")
        equal = doc["equal"] if doc is not None and isinstance(doc.get("equal"), bool) else None
        if equal is None:
            equal = same_bits(engine)
            write_result(key, {"equal": equal}, "gqa-")
        checked[mem] = equal
    return GQA_SDPA if checked[mem] else None


# forward sizes: a prefill with no mask, then short prefills and decodes after it, then a long
# block over more than a thousand cached rows (the kernel tiles long queries and keys otherwise)
PROBE = (24, 16, 1, 5, 1, 40, 3, 1100, 800, 7)


def same_bits(engine, probe=PROBE) -> bool:
    """Run the probe's forwards under transformers' kernel and under `GQA_SDPA` on two fresh
    caches; True if every forward's logits and the final K/V are `torch.equal`."""
    from unsee.impl.engine.kv import KVEngine

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, engine.model.config.vocab_size, (sum(probe),), generator=g).tolist()
    runs = []
    for kernel in (None, GQA_SDPA):
        e = KVEngine(engine.model, engine.device, engine.threads, kernel=kernel)
        at, logits = 0, []
        for n in probe:
            logits.append(e.prefill_logits(ids[at:at + n]))
            at += n
        runs.append((e, logits))
    (a, la), (b, lb) = runs
    equal = all(torch.equal(x, y) for x, y in zip(la, lb)) and all(
        torch.equal(x, y) for p, q in zip(a.kv_tensors(), b.kv_tensors()) for x, y in zip(p, q))
    a.release()
    b.release()
    return equal
