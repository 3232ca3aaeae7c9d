"""The real small model: SmolLM2-135M-Instruct from its PyPI package (slow tier)."""

import pytest

from unsee.impl.engine.kv_runtime import KVRuntime
from unsee.impl.engine.exact import compare
from unsee.impl.experiments.demo import CONFIG, EPISODE, TARGET, TAU

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def contaminated():
    rt = KVRuntime("smollm2", CONFIG)
    for o in EPISODE:
        rt.step(o)
    return rt


def test_smollm2_selective_replay_is_bit_exact_against_full_reset(contaminated):
    b7, b5 = contaminated.branch(), contaminated.branch()
    r7 = b7.forget([TARGET], method="B7")
    r5 = b5.forget([TARGET], method="B5")
    eq = compare(b7, b5)
    assert all(eq.values()), eq
    assert (r7.transitions, r5.transitions) == (len(EPISODE) - TAU + 1, len(EPISODE))
    assert r7.work.tokens_rematerialized == 0 and r7.work.tokens_restored > 0  # pages, not compute


def test_smollm2_memory_delete_is_not_forgetting(contaminated):
    from unsee.impl.experiments.baselines import memory_delete

    b1, b5 = contaminated.branch(), contaminated.branch()
    memory_delete(b1, [TARGET])
    b5.forget([TARGET], method="B5")
    eq = compare(b1, b5)
    assert not eq["kv_torch_equal"] and not eq["probe_logits_torch_equal"]
