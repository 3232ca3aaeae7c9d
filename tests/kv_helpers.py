"""Shared fixtures for the real-engine tiers."""

from unsee.impl.engine.kv_runtime import KVRuntime
from unsee.model import Config, Observation, Part
from unsee.model.state import forward_groups
from unsee.specs import mutants

FAMILIES = ("tiny-llama", "tiny-qwen2", "tiny-mistral")

EPISODE = (
    Observation("system", (Part("sys", "you are an agent"),)),
    Observation("user", (Part("u1", "plan the trip to the coast"),), reply=4),
    Observation("memory", (Part("z", "alice lives at 12 elm street"),)),
    Observation("user", (Part("u2", "send it to her"),), reply=3, tool="send"),
    Observation("tool", (Part("t1", "ok booked"),), reply=3, tool="lookup"),
    Observation("user", (Part("u3", "summarize please"),), reply=2, compact=True),
    Observation("user", (Part("u4", "thanks"),), reply=3),
)


def prompts(state, after: int) -> list[int]:
    """The prompt of each model turn of the transitions after `after`: the prompt blocks joined
    to it (its observation) and its header, the tokens of its drafting forward."""
    bl = state.blocks
    return [bl[j].start + bl[j].prefill - bl[i].start for i, j in forward_groups(bl)
            if bl[j].kind == "assistant" and int(bl[j].artifact[1:].split(".")[0]) > after]


def kv_factory(model, policy="every", dtype="float32", **cfg):
    return lambda: KVRuntime(model, Config(**cfg), policy, dtype=dtype)


def drive(rt, stream):
    rt.reset()
    for o in stream:
        rt.step(o)
    return rt


def assert_b7_equals_b5(model, dtype="float32"):
    """B7 on EPISODE equals B5 in every layer (K/V under torch.equal), in T−τ+1 transitions."""
    from unsee.impl.engine.exact import compare

    b7 = drive(kv_factory(model, dtype=dtype)(), EPISODE)
    receipt = b7.forget(["z"])
    b5 = drive(kv_factory(model, dtype=dtype)(), EPISODE)
    b5.forget(["z"], method="B5")
    eq = compare(b7, b5)
    assert all(eq.values()), eq
    assert receipt.transitions == len(EPISODE) - 3 + 1


class ReusePostTauCacheKV(mutants.ReusePostTauCache):
    """The post-τ-cache mutant over a KVEngine's cache: the replayed rows grafted onto a copy of
    the contaminated cache's first rows."""

    @staticmethod
    def snapshot(lm, kv):
        return [(k.clone(), v.clone()) for k, v in lm.engine.engine.kv_tensors()]

    @staticmethod
    def graft(lm, kv, old):
        """Overwrite the first min(len) rows of the resident cache with a snapshot's rows."""
        import torch

        with torch.inference_mode():
            for layer, (k, v) in zip(lm.engine.engine.cache.layers, old):
                n = min(k.shape[-2], layer.keys.shape[-2])
                layer.keys = torch.cat([k[..., :n, :], layer.keys[..., n:, :]], dim=-2)
                layer.values = torch.cat([v[..., :n, :], layer.values[..., n:, :]], dim=-2)
        return kv


def on_engine(mutant):
    """A mutant of `unsee.specs.mutants` as the core of a KVRuntime."""
    return ReusePostTauCacheKV if mutant is mutants.ReusePostTauCache else mutant
