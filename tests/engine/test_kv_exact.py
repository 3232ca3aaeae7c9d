"""Bit-exactness on the real engine: the specs, torch.equal per layer, probes, the differential."""

import pytest
import torch

from unsee.impl.engine.exact import compare
from unsee.model import Config
from unsee.specs.reference import ReferenceRuntime
from unsee.specs import statements as S
from unsee.specs.harness import verify
from unsee.specs.mutants import MUTANTS
from unsee.impl.engine.kv_runtime import KVRuntime, kv_factory_for
from tests.kv_helpers import EPISODE, FAMILIES, assert_b7_equals_b5, drive, kv_factory, on_engine


@pytest.mark.tiny
@pytest.mark.parametrize("model", FAMILIES)
def test_random_sessions_forget_exactly_and_optimally(model):
    # (the 72 directed placements on each model family are the slow tier's: test_kv_placements)
    doc = verify(kv_factory_for(model), examples=12, seed=1, max_ops=8, engine=model, directed=False)
    assert doc["failures"] == [], doc["failures"]
    assert doc["forgets"] > 0 and doc["exact"] == doc["optimal_invocations"] == doc["forgets"]


@pytest.mark.tiny
@pytest.mark.parametrize("model", FAMILIES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_selective_replay_equals_full_reset_under_torch_equal(model, dtype):
    assert_b7_equals_b5(model, dtype)


@pytest.mark.tiny
@pytest.mark.parametrize("model", FAMILIES)
def test_every_statement_holds_on_the_real_engine(model):
    ob = S.observe(kv_factory(model), EPISODE, ["z"])
    S.check_all(ob)
    S.assumption_a1_deterministic_decoding(kv_factory(model, sampling=True, seed=3), EPISODE)


@pytest.mark.tiny
def test_unseeded_sampling_on_the_real_engine_is_an_a1_violation():
    with pytest.raises(S.AssumptionViolated, match="A1"):
        S.assumption_a1_deterministic_decoding(kv_factory("tiny-llama", sampling=True, seed=None), EPISODE)


@pytest.mark.tiny
@pytest.mark.parametrize("policy", ["every", "events", "start"])
def test_model_and_impl_agree_on_tau_closure_checkpoint_and_counts(policy):
    ref = S.observe(lambda: ReferenceRuntime(Config(), policy), EPISODE, ["z"])
    kv = S.observe(kv_factory("tiny-llama", policy=policy), EPISODE, ["z"])
    shape = lambda ob: sorted((ob.graphs[-1].nodes[a]["type"], ob.graphs[-1].nodes[a]["turn"])  # noqa: E731
                              for a in ob.receipt.taint)
    assert ref.tau == kv.tau == 3
    assert shape(ref) == shape(kv)
    assert ref.receipt.checkpoint == kv.receipt.checkpoint
    assert ref.receipt.transitions == kv.receipt.transitions
    assert ref.twin_invocations == kv.twin_invocations == len(EPISODE)


@pytest.mark.tiny
@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutant_is_caught_on_the_real_engine(mutant):
    # B3 keeps edges from the fields it dropped: the kit refuses its graph where it is read
    expected = "a node it never added" if mutant.name == "source-redaction-B3" else "Theorem 1"
    with pytest.raises(S.SpecViolation, match=expected):
        S.check_all(S.observe(lambda: KVRuntime("tiny-llama", Config(), core=on_engine(mutant)), EPISODE, ["z"]))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("model", FAMILIES)
def test_bit_exact_on_cuda(model):
    f = lambda: KVRuntime(model, Config(), "every", device="cuda")  # noqa: E731
    b7, b5 = drive(f(), EPISODE), drive(f(), EPISODE)
    b7.forget(["z"])
    b5.forget(["z"], method="B5")
    eq = compare(b7, b5)
    assert all(eq.values()), eq


@pytest.mark.slow
def test_kv_placements():
    """The kit's 72 directed placements (every combination of where the statements' rules fall
    relative to τ, c* and T) on the KV engine with a real tiny model."""
    doc = verify(kv_factory_for("tiny-llama"), examples=0, seed=0, engine="tiny-llama")
    assert doc["failures"] == [], doc["failures"]
    assert doc["forgets"] >= 72 and doc["exact"] == doc["optimal_invocations"] == doc["forgets"]
