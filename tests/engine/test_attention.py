"""The attention kernel that reads grouped key and value heads in place (`unsee.impl.engine.attention`):
the same bits as transformers' SDPA kernel, used only where its probe says so."""

import pytest
import torch
from transformers import AttentionInterface

from unsee.impl.engine import attention as A
from unsee.impl.engine.kv import KVEngine
from unsee.impl.engine.models import load

pytestmark = pytest.mark.tiny

CASES = [(f, d) for f in ("tiny-llama", "tiny-qwen2", "tiny-mistral") for d in ("float32", "bfloat16")] + [
    pytest.param("smollm2", "float32", marks=pytest.mark.slow), pytest.param("smollm2", "bfloat16", marks=pytest.mark.slow)]


def session(e: KVEngine, vocab: int) -> list:
    """Prefills of several sizes, a fixed-point reply, decodes, a crop and more prefills: every
    forward's logits, then the K/V."""
    g = torch.Generator().manual_seed(1)
    ids = lambda n: torch.randint(10, vocab, (n,), generator=g).tolist()  # noqa: E731
    seen = [e.prefill_logits(ids(37))]
    e.prefill(ids(90), logits=False)
    e.prefill(ids(6))
    seen.append(e.logits)
    reply, _, _ = e.fixed_point(7)
    seen.append(torch.tensor(reply))
    e.prefill(ids(2))
    seen.append(torch.tensor(e.decode(4)))
    e.crop(len(e) - 5)
    seen.append(e.prefill_logits(ids(19)))
    e.prefill(ids(1100), logits=False)  # long blocks over more than a thousand cached rows
    seen.append(e.prefill_logits(ids(800)))
    return seen + [t for pair in e.kv_tensors() for t in pair]


@pytest.mark.parametrize("family,dtype", CASES)
def test_reading_grouped_heads_in_place_gives_transformers_bits(family, dtype, monkeypatch):
    b = load(family, dtype, attn="sdpa")
    assert A.grouped(b.model)  # query heads share key heads: the case the kernel changes
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda q, k, v, **kw: calls.append((q.shape[1], k.shape[1], kw.get("attn_mask") is not None))
                        or sdpa(q, k, v, **kw))
    stock = session(KVEngine(b.model, b.device, kernel=None), b.model.config.vocab_size)
    repeated = [c for c in calls if c[2]]
    assert repeated and all(q == k for q, k, _ in repeated)  # transformers copied the heads (repeat_kv)
    calls.clear()
    mine = session(KVEngine(b.model, b.device, kernel=A.GQA_SDPA), b.model.config.vocab_size)
    in_place = [c for c in calls if c[2]]
    assert in_place and all(q > k for q, k, _ in in_place)  # every masked forward read the heads in place
    assert len(stock) == len(mine)
    for x, y in zip(stock, mine):
        assert torch.equal(x, y)
    assert b.model.config._attn_implementation == "sdpa"  # switched for each call only


def test_the_runtime_runs_under_it_and_its_states_match_transformers_kernel():
    """An agent's LM picks the kernel by its probe; a session and a forget under it leave the
    digests that transformers' own kernel leaves."""
    from unsee.impl.engine.kv_runtime import KVRuntime
    from unsee.model.state import Observation, Part

    runs = []
    for kernel in (A.GQA_SDPA, None):
        rt = KVRuntime("tiny-mistral", attn="sdpa")
        assert rt.engine.kernel == A.GQA_SDPA
        rt.engine.kernel = kernel
        for t, text in enumerate(("plan the trip", "the code is 4417", "book it", "what next")):
            rt.step(Observation("user", (Part("z" if t == 1 else f"u{t}", text),), reply=6))
        rt.forget(["z"], method="B7")
        runs.append(rt.digest())
    assert runs[0] == runs[1]


def pair_heads_wrongly(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kw):
    """A planted kernel: query head h reads key head h mod Hkv (tiled) instead of h // (H / Hkv)."""
    groups = query.shape[1] // key.shape[1]
    out = torch.nn.functional.scaled_dot_product_attention(query, key.repeat(1, groups, 1, 1), value.repeat(1, groups, 1, 1),
                                                           attn_mask=attention_mask, scale=scaling,
                                                           is_causal=attention_mask is None and query.shape[2] > 1)
    return out.transpose(1, 2).contiguous(), None


def test_the_probe_decides_and_its_result_is_kept_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("UNSEE_CACHE_DIR", str(tmp_path))
    probes = []
    real = A.same_bits
    monkeypatch.setattr(A, "same_bits", lambda e: probes.append(1) or real(e))
    b = load("tiny-llama", attn="sdpa")
    monkeypatch.setitem(b.model.__dict__, "unsee_gqa_checked", {})  # the result is kept on the model
    assert A.gqa_kernel(KVEngine(b.model, b.device)) == A.GQA_SDPA and len(probes) == 1
    assert list((tmp_path / "selftest").glob("gqa-*.json"))
    monkeypatch.setitem(b.model.__dict__, "unsee_gqa_checked", {})  # a new process: read back, not measured
    assert A.gqa_kernel(KVEngine(b.model, b.device)) == A.GQA_SDPA and len(probes) == 1
    assert A.gqa_kernel(KVEngine(load("tiny-llama").model, b.device)) is None  # eager: transformers' own kernel


def test_a_kernel_that_pairs_heads_wrongly_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("UNSEE_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(AttentionInterface._global_mapping, A.GQA_SDPA, pair_heads_wrongly)
    b = load("tiny-qwen2", attn="sdpa")
    monkeypatch.setitem(b.model.__dict__, "unsee_gqa_checked", {})
    assert not A.same_bits(KVEngine(b.model, b.device, kernel=None))
    assert A.gqa_kernel(KVEngine(b.model, b.device)) is None  # the probe found other bits: transformers' kernel
