"""KVEngine unit behaviour: counters, crop releases bytes, clone is independent, refusals."""

import pytest
import torch

from unsee.impl.engine.exact import ExactnessError
from unsee.impl.engine.kv import KVEngine, RowsLayer
from unsee.impl.engine.models import load

pytestmark = pytest.mark.tiny


@pytest.fixture(scope="module")
def bundle():
    return load("tiny-llama")


def test_counters_follow_the_canonical_schedule(bundle):
    e = KVEngine(bundle.model, bundle.device)
    e.prefill([1, 2, 3, 4])
    out = e.decode(3)
    assert len(out) == 3
    assert (e.forwards, e.tokens_prefilled, e.tokens_decoded) == (4, 4, 3)
    assert len(e) == 7


def test_crop_overwrites_the_dropped_bytes(bundle):
    e = KVEngine(bundle.model, bundle.device)
    e.prefill(list(range(10, 30)))
    old_keys = [layer.keys for layer in e.cache.layers]
    assert all(k[..., 12:, :].abs().sum() > 0 for k in old_keys)
    e.crop(12)
    assert len(e) == 12
    for k_old, layer in zip(old_keys, e.cache.layers):
        assert torch.count_nonzero(k_old[..., 12:, :]) == 0  # the storage that held them is zeroed
        # the kept rows stay in the layer's buffer (no copy) and nothing past them is left there
        assert layer.keys.data_ptr() == layer.buffers[0].data_ptr()
        assert torch.count_nonzero(layer.buffers[0][..., 12:, :]) == 0
        assert torch.count_nonzero(layer.buffers[1][..., 12:, :]) == 0


def test_a_crop_to_a_small_part_of_a_large_buffer_moves_the_rows_and_wipes_the_buffer(bundle):
    e = KVEngine(bundle.model, bundle.device)
    e.prefill([10 + i % 100 for i in range(1100)], logits=False)
    before = [(layer.keys[..., :3, :].clone(), layer.buffers) for layer in e.cache.layers]
    e.crop(3)
    for (kept, (bk, bv)), layer in zip(before, e.cache.layers):
        assert torch.equal(layer.keys, kept)
        assert layer.keys.untyped_storage().data_ptr() != bk.untyped_storage().data_ptr()
        assert torch.count_nonzero(bk) == 0 and torch.count_nonzero(bv) == 0  # every byte of the old buffer
    moved = [(layer.keys, layer.values) for layer in e.cache.layers]
    e.prefill([7, 8])  # the rows go into a buffer again, and the copy they left is zeroed
    assert all(not k.any() and not v.any() for k, v in moved)


def test_appending_many_pages_allocates_the_buffer_once(bundle, monkeypatch):
    a = KVEngine(bundle.model, bundle.device)
    a.prefill([10 + i % 100 for i in range(700)], logits=False)
    pages = [a.rows(1 + 50 * i, 1 + 50 * (i + 1)) for i in range(13)]  # 650 rows, 13 pages
    b = KVEngine(bundle.model, bundle.device)
    b.prefill([10], logits=False)  # a 256-row buffer per layer
    grown = []
    wipe = RowsLayer.wipe
    monkeypatch.setattr(RowsLayer, "wipe", lambda layer: grown.append(id(layer)) or wipe(layer))
    b.append_pages(pages)
    # one new buffer per layer (page by page it would grow 256 → 512 → 1024), with room for a suffix
    assert sorted(grown) == sorted(id(layer) for layer in b.cache.layers)
    assert all(layer.buffers[0].shape[-2] >= 651 + 651 // 4 for layer in b.cache.layers)
    for (ka, va), (kb, vb) in zip(a.kv_tensors(), b.kv_tensors()):
        assert torch.equal(ka[..., 1:651, :], kb[..., 1:, :]) and torch.equal(va[..., 1:651, :], vb[..., 1:, :])


def test_crop_then_prefill_is_bit_exact_against_a_fresh_run(bundle):
    a = KVEngine(bundle.model, bundle.device)
    a.prefill([5, 6, 7])
    a.prefill([8, 9])
    a.decode(2)
    a.crop(3)
    a.prefill([8, 9])
    a.decode(2)
    b = KVEngine(bundle.model, bundle.device)
    b.prefill([5, 6, 7])
    b.prefill([8, 9])
    b.decode(2)
    for (ka, va), (kb, vb) in zip(a.kv_tensors(), b.kv_tensors()):
        assert torch.equal(ka, kb) and torch.equal(va, vb)


def test_clone_is_independent(bundle):
    a = KVEngine(bundle.model, bundle.device)
    a.prefill([1, 2, 3])
    b = a.clone()
    b.prefill([4])
    assert len(a) == 3 and len(b) == 4


def test_seeded_sampling_repeats(bundle):
    def run(draws):
        e = KVEngine(bundle.model, bundle.device)
        e.prefill([1, 2, 3])
        return e.decode(6, draws)
    assert run([11, 12, 13, 14, 15, 16]) == run([11, 12, 13, 14, 15, 16])


def test_non_deterministic_attention_is_refused(bundle):
    bundle.model.config._attn_implementation = "flash_attention_2"
    try:
        with pytest.raises(ExactnessError, match="not deterministic"):
            KVEngine(bundle.model, bundle.device)
    finally:
        bundle.model.config._attn_implementation = "eager"


def test_training_mode_is_refused(bundle):
    bundle.model.train()
    try:
        with pytest.raises(ExactnessError, match="training mode"):
            KVEngine(bundle.model, bundle.device)
    finally:
        bundle.model.eval()


def _script(e: KVEngine) -> tuple[list, list, int]:
    """Prefills, replies (decoded, from a wrong draft, from the right one), a crop into fresh
    storage, rows and pages appended, and growth past the row buffer: (every logits read, the
    final K/V, decode runs)."""
    g = torch.Generator().manual_seed(7)
    ids = lambda n: torch.randint(10, 990, (n,), generator=g).tolist()  # noqa: E731
    seen, runs = [], 0
    e.prefill(ids(40))
    seen.append(e.logits.clone())
    for _ in range(4):
        e.prefill(ids(6))
        start, head = len(e), e.logits
        out, _, _ = e.fixed_point(5)  # decoded: one run
        seen += [e.logits.clone(), torch.tensor(out)]
        e.crop(start, fresh_storage=False)
        e.logits = head
        wrong = [out[0]] + [(t + 1) % 990 for t in out[1:]]
        again, _, _ = e.fixed_point(5, draft=wrong)  # rejected at token 1: one more run
        seen += [e.logits.clone(), torch.tensor(again)]
        runs += 2
    n = len(e)
    page, donor = e.rows(n - 20, n), e.clone()
    e.crop(n - 20)  # fresh storage, as a restore does
    e.append_pages([page[:, :, :, :8], page[:, :, :, 8:]])
    e.crop(n - 10)
    e.append_rows(donor.cache, n - 10, n)
    e.prefill(ids(300))  # past the first row buffer
    seen.append(e.logits.clone())
    seen.append(e.prefill_logits(ids(9)))
    return seen, [t.clone() for pair in e.kv_tensors() for t in pair], runs


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("model", ["tiny-llama", "tiny-qwen2", "tiny-mistral"])
def test_rows_in_place_and_no_wasted_forward_give_the_same_bits(model, dtype, attn):
    """Against the old path (a concatenating DynamicCache; the last token of every decoded draft
    fed through the model): every logits row and every K/V byte torch.equal, one forward fewer
    per decoded draft."""
    from transformers import DynamicCache

    from unsee.impl.engine.kv import RowsLayer

    b = load(model, dtype=dtype, attn=attn)
    new, old = KVEngine(b.model, b.device), KVEngine(b.model, b.device)
    old.cache = DynamicCache()
    old.decode = lambda n, draws=None, temperature=1.0, feed_last=True: KVEngine.decode(old, n, draws, temperature)
    a, b_ = _script(new), _script(old)
    assert all(isinstance(layer, RowsLayer) for layer in new.cache.layers)
    assert not any(isinstance(layer, RowsLayer) for layer in old.cache.layers)
    assert len(a[0]) == len(b_[0]) and all(torch.equal(x, y) for x, y in zip(a[0], b_[0]))
    assert len(a[1]) == len(b_[1]) and all(torch.equal(x, y) for x, y in zip(a[1], b_[1]))
    assert old.forwards - new.forwards == a[2]
    assert new.tokens_decoded == old.tokens_decoded - a[2]


def test_a_row_buffer_is_zeroed_where_rows_are_cropped_and_when_it_goes(bundle):
    e = KVEngine(bundle.model, bundle.device)
    e.prefill(list(range(10, 60)))
    bufs = [layer.buffers for layer in e.cache.layers]
    assert all(k.shape[-2] == 256 and k[..., :50, :].abs().sum() > 0 for k, _ in bufs)
    e.crop(20)  # in place: the dropped rows zeroed where they lie
    assert all(not k[..., 20:, :].any() and not v[..., 20:, :].any() for k, v in bufs)
    assert all(layer.buffers is b for layer, b in zip(e.cache.layers, bufs))
    e.prefill(list(range(10, 30)))
    kept = [layer.buffers for layer in e.cache.layers]
    e.release()
    assert all(not k.any() and not v.any() for k, v in kept)


def test_the_row_independence_result_is_kept_on_disk(bundle, tmp_path, monkeypatch):
    """A new process reads the self-test's result instead of running it again, for exactly the
    key it was computed under; a result stored under another key is never read."""
    from unsee.impl.engine import selftest as K

    monkeypatch.setenv("UNSEE_CACHE_DIR", str(tmp_path))
    runs = []
    real = K._rows_independent
    monkeypatch.setattr(K, "_rows_independent", lambda *a: runs.append(1) or real(*a))
    monkeypatch.setattr(K, "_ROWS_CHECKED", {})
    e = KVEngine(bundle.model, bundle.device)
    assert K.row_independence(e)[0] and len(runs) == 1
    files = list((tmp_path / "selftest").glob("*.json"))
    assert len(files) == 1
    monkeypatch.setattr(K, "_ROWS_CHECKED", {})  # a new process
    assert K.row_independence(e)[0] and len(runs) == 1  # read back, not run
    key = {**K.selftest_key(e, "eager"), "shape": [24, 16]}
    assert K.read_selftest(key) is True
    for field, other in (("threads", 2), ("attn", "sdpa"), ("torch", "0.0"), ("cpu", "other"), ("dtype", "x")):
        assert K.read_selftest({**key, field: other}) is None
    K.write_selftest(key, False)  # what is stored for this key is what is used
    monkeypatch.setattr(K, "_ROWS_CHECKED", {})
    holds, note = K.row_independence(e)
    assert not holds and "skipping refused" in note and len(runs) == 1
    files[0].write_text("{not json")
    monkeypatch.setattr(K, "_ROWS_CHECKED", {})
    assert K.row_independence(e)[0] and len(runs) == 2  # unreadable: run again and rewritten
    assert K.read_selftest(key) is True


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("model", ["tiny-llama", "tiny-qwen2", "tiny-mistral"])
def test_prompt_blocks_without_logits_give_the_same_bits(model, dtype, attn, monkeypatch):
    """A prompt block's logits are never read (a header follows), so its forward runs the output
    layer on one row: against the old path (logits of every row), the same replies, the same
    K/V bytes (torch.equal) after a session with tool calls, a forget and a rebuild."""
    from unsee.impl.engine.kv_runtime import KVRuntime
    from unsee.impl.experiments.bench_sessions import agent_session
    from unsee.model import Config

    def session():
        rt = KVRuntime(model, Config(summary_tokens=4), dtype=dtype, attn=attn)
        for o in agent_session(14, None, 0.0, 4)[0]:
            rt.step(o)
        rt.forget(["z"])
        rt.model.chain, rt.model.pages, rt.model.kv_pages = [], {}, False  # nothing to keep or read back
        state = rt.session.state
        kv, computed = rt.model.rebuild(state.tokens, state.blocks)
        assert computed == len(state.tokens)  # every block recomputed, through the rebuild's prefills
        return rt.session.state.outputs, [t.clone() for pair in rt.engine.kv_tensors() for t in pair]

    new = session()
    old_prefill = KVEngine.prefill
    monkeypatch.setattr(KVEngine, "prefill", lambda self, ids, logits=True: old_prefill(self, ids, True))
    old = session()
    assert new[0] == old[0]
    assert len(new[1]) == len(old[1]) and all(torch.equal(x, y) for x, y in zip(new[1], old[1]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_digest_reads_a_layer_in_place_and_hashes_its_contiguous_bytes(dtype):
    """tensor_digest hashes the bytes of `t.contiguous()` without copying a layer out of its buffer:
    a strided view (a cache layer inside a larger buffer), a transposed one, a strided vector and an
    empty one each hash as their contiguous copy does, and one changed element changes the digest."""
    import hashlib

    from unsee.impl.engine.kv import tensor_digest

    def copied(tensors):
        h = hashlib.sha256()
        for t in tensors:
            h.update(str(tuple(t.shape)).encode())
            h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
        return h.hexdigest()[:16]

    g = torch.Generator().manual_seed(0)
    buffer = torch.randn(1, 3, 40, 8, generator=g).to(dtype)
    cases = [buffer[..., :29, :], torch.randn(6, 5, generator=g).to(dtype).t(),
             torch.randn(7, 4, generator=g).to(dtype)[:, 1], buffer[..., :0, :], buffer]
    for t in cases:
        assert not t.is_contiguous() or t is buffer or t.numel() == 0
        assert tensor_digest([t]) == copied([t])
    assert tensor_digest(cases) == copied(cases)
    before = tensor_digest([buffer[..., :29, :]])
    buffer[0, 2, 28, 7] += 1
    assert tensor_digest([buffer[..., :29, :]]) != before
