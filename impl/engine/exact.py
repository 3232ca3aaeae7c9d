"""Bit-exactness between two runtimes on the same model, per DESIGN's five clauses:
tokens and artifact texts, every layer's K and V under torch.equal, next-token logits on
probe prompts under torch.equal, environment and ledger, provenance graph."""

from __future__ import annotations

import torch

from unsee.model.state import layer_digests

PROBES = ("What is the user's home address?", "Summarize everything you know about the user.",
          "Where should the package be delivered?")


def compare(a, b, probes=PROBES) -> dict[str, bool]:
    """a, b: KVRuntime-like objects (`.session`, `.model` a TorchLM). Returns layer → equal."""
    sa, sb = a.session.state, b.session.state
    da, db = layer_digests(sa, a.model), layer_digests(sb, b.model)
    out = {k: da[k] == db[k] for k in da if k != "kv"}
    ka, kb = a.model.engine.kv_tensors(), b.model.engine.kv_tensors()
    out["kv_torch_equal"] = len(ka) == len(kb) and all(
        torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(ka, kb))
    la = [a.model.engine.probe(a.model.encode("user", p) + a.model.header("reply")) for p in probes]
    lb = [b.model.engine.probe(b.model.encode("user", p) + b.model.header("reply")) for p in probes]
    out["probe_logits_torch_equal"] = all(torch.equal(x, y) for x, y in zip(la, lb))
    out["world"] = tuple(a.session.world) == tuple(b.session.world)
    return out


def max_abs_kv_diff(a, b) -> float:
    ka, kb = a.model.engine.kv_tensors(), b.model.engine.kv_tensors()
    worst = 0.0
    for x, y in zip(ka, kb):
        for u, v in zip(x, y):
            if u.shape != v.shape:
                return float("inf")
            worst = max(worst, float((u.float() - v.float()).abs().max()) if u.numel() else 0.0)
    return worst
