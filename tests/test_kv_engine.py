"""KVEngine unit behaviour: counters, crop releases bytes, clone is independent, refusals."""

import pytest
import torch

from unsee.impl.engine.exact import ExactnessError
from unsee.impl.engine.kv import KVEngine
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
        assert layer.keys.untyped_storage().data_ptr() != k_old.untyped_storage().data_ptr()


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
