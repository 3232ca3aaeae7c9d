"""Exactness: the settings that make F's bits the same every run (`pin_determinism`,
`check_exact_config`), and bit-exactness between two runtimes on the same model, per
DESIGN's five clauses: tokens and artifact texts, every layer's K and V under torch.equal,
next-token logits on probe prompts under torch.equal, environment and ledger, provenance graph."""

from __future__ import annotations

import os

import torch

from unsee.model.errors import UnseeError
from unsee.model.state import layer_digests


class ExactnessError(UnseeError, ValueError):
    """A configuration that would silently break bit-exactness."""


def pin_determinism(device: torch.device, threads: int) -> None:
    """Same bits every run: one thread count, deterministic kernels (CUDA needs the
    cuBLAS workspace setting before its first call)."""
    torch.set_num_threads(threads)
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = False
        torch.use_deterministic_algorithms(True)


def settle(device: torch.device) -> None:
    """Wait for the device's queued work (a CUDA launch returns before its kernel runs), so that a
    clock read after it times the work; nothing to wait for on a CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_exact_config(model) -> None:
    cfg = model.config
    impl = getattr(cfg, "_attn_implementation", None) or "eager"  # private to transformers' configs
    if impl not in ("eager", "sdpa"):
        raise ExactnessError(f"attention implementation {impl!r} is not deterministic here; load with "
                             "attn_implementation='eager' or 'sdpa'")
    if model.training:
        raise ExactnessError("the model is in training mode (dropout); call model.eval()")
    # Sliding-window layers: the engine's plain DynamicCache keeps every position, so a crop
    # never needs positions that a sliding cache would have dropped.

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
