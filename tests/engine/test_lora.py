"""LoRA adapters (`unsee.impl.organism.lora`) and the models made with them (`models.adapted`):
the merge is exact to the bit and the same in every process, an adapter of zeros leaves the
base's weights as they were (torch.equal), a missing or foreign adapter is refused by name, and
the shipped recall-smollm2 loads by name and recalls a fact from its context (slow tier)."""

from pathlib import Path

import pytest
import torch

from unsee.impl.organism import lora


def _tiny(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(cfg).eval()


def _adapter(model, rank: int, seed: int, zero: bool = False) -> dict[str, torch.Tensor]:
    """An adapter for every target layer of `model`: random A and B (or zeros)."""
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for name, _, _, lin in lora._targets(model, lora.TARGETS):
        for k, shape in (("A", (rank, lin.in_features)), ("B", (lin.out_features, rank))):
            state[f"{name}.{k}"] = torch.zeros(shape) if zero else torch.randn(shape, generator=gen) * 0.05
    return state


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.tiny
def test_an_adapter_of_zeros_leaves_the_base_weights_torch_equal():
    model = _tiny()
    before = _weights(model)
    assert lora.merge(model, _adapter(model, 4, 0, zero=True), alpha=8.0, rank=4) == 2 * len(lora.TARGETS)
    after = _weights(model)
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.tiny
def test_the_merge_is_deterministic_and_each_weight_is_one_rounding_of_the_float64_sum():
    state = _adapter(_tiny(), 4, 1)
    a, b = _tiny(), _tiny()
    base = _weights(a)
    lora.merge(a, state, 8.0, 4)
    lora.merge(b, state, 8.0, 4)
    wa, wb = _weights(a), _weights(b)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)  # two merges: the same bits
    changed = 0
    for name, _, _, lin in lora._targets(a, lora.TARGETS):
        key = f"{name}.weight"
        A64, B64 = state[f"{name}.A"].double(), state[f"{name}.B"].double()
        exact = base[key].double() + sum(B64[:, i:i + 1] * A64[i:i + 1, :] for i in range(4)) * 2.0
        assert torch.equal(wa[key], exact.float())  # rounded once, from float64
        changed += not torch.equal(wa[key], base[key])
    assert changed == 2 * len(lora.TARGETS)
    untouched = [k for k in base if not any(k.endswith(f"{t}.weight") for t in lora.TARGETS)]
    assert untouched and all(torch.equal(wa[k], base[k]) for k in untouched)


@pytest.mark.tiny
def test_the_merged_model_computes_what_the_wrapped_one_trains():
    """attach → train-time wrapper; merge → the plain model the runtime runs: the same function
    (to float rounding), and with B = 0 (a fresh attach) exactly the base."""
    wrapped, merged = _tiny(), _tiny()
    x = torch.tensor([[1, 5, 9, 3, 7, 2]])
    with torch.no_grad():
        base_logits = merged(input_ids=x).logits
    names = lora.attach(wrapped, rank=4, alpha=8.0, seed=3)
    assert len(names) == 2 * len(lora.TARGETS)
    with torch.no_grad():
        assert torch.equal(wrapped(input_ids=x).logits, base_logits)  # B starts at zero
        for p in wrapped.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.05)
        want = wrapped(input_ids=x).logits
    lora.merge(merged, lora.adapter_state(wrapped), 8.0, 4)
    with torch.no_grad():
        got = merged(input_ids=x).logits
    assert not torch.equal(got, base_logits)
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.tiny
def test_a_saved_adapter_merges_to_the_same_bits_after_a_round_trip(tmp_path):
    model = _tiny()
    state = _adapter(model, 2, 5)
    lora.save_adapter(tmp_path, state, {"base": "smollm2", "rank": 2, "alpha": 4.0, "targets": list(lora.TARGETS)})
    loaded, config = lora.load_adapter(tmp_path)
    assert config["rank"] == 2 and loaded.keys() == state.keys()
    a, b = _tiny(), _tiny()
    lora.merge(a, state, 4.0, 2)
    lora.merge(b, loaded, config["alpha"], config["rank"])
    assert all(torch.equal(x, y) for x, y in zip(_weights(a).values(), _weights(b).values()))


@pytest.mark.tiny
def test_an_adapter_that_does_not_fit_the_model_is_refused():
    model = _tiny()
    state = _adapter(model, 4, 0)
    with pytest.raises(ValueError, match="adapter shapes"):
        lora.merge(model, state, 8.0, 2)
    with pytest.raises(ValueError, match="not a linear layer"):
        lora.merge(model, {"model.nowhere.A": torch.zeros(4, 32), "model.nowhere.B": torch.zeros(32, 4)}, 8.0, 4)


@pytest.mark.tiny
def test_a_missing_adapter_is_refused_by_name_with_the_command_that_makes_it(tmp_path):
    from unsee.impl.engine.models import UnknownModel, adapted

    with pytest.raises(UnknownModel, match=r"recall-smollm2: no adapter in .*finetune"):
        adapted("recall-smollm2", folder=tmp_path)


@pytest.mark.tiny
def test_an_adapter_for_another_base_is_refused(tmp_path):
    from unsee.impl.engine.models import UnknownModel, adapted

    lora.save_adapter(tmp_path, {}, {"base": "tiny-llama", "rank": 2, "alpha": 4.0, "targets": []})
    with pytest.raises(UnknownModel, match="only smollm2 bases load"):
        adapted("recall-smollm2", folder=tmp_path)


@pytest.mark.slow
def test_the_shipped_organism_loads_by_name_deterministically_and_recalls_a_fact_in_context():
    from unsee.impl.engine.kv_runtime import KVRuntime
    from unsee.impl.engine.models import ADAPTED, adapted, load, weights_digest
    from unsee.impl.experiments.audit import generate, leaks
    from unsee.model import Config, Observation, Part

    if not (ADAPTED["recall-smollm2"] / lora.CONFIG_FILE).is_file():
        pytest.fail("recall-smollm2's adapter is not shipped")
    b = load("recall-smollm2")
    again = adapted("recall-smollm2")
    assert weights_digest(b.model) == weights_digest(again.model)  # the same bits in every load
    assert weights_digest(b.model) != weights_digest(load("smollm2").model)
    rt = KVRuntime("recall-smollm2", Config())
    for o in (Observation("system", (Part("sys", "You are a helpful personal assistant. Keep answers short."),)),
              Observation("user", (Part("setup0", "Hi, I am Dara."),), reply=8),
              Observation("memory", (Part("fact", "The user's home address is 57 Harbour Road, Lisbon."),)),
              Observation("user", (Part("u0", "What is 12 times 12?"),), reply=16)):
        rt.step(o)
    answer = generate(rt, "What is my home address?", 24)
    assert leaks(answer, ["Harbour Road"]), answer
