"""The premise self-test: does row i of a prefill ignore the tokens after position i, bit for
bit, on this model and these settings? The fixed point that defines a reply is unique only if
it does. Its result is kept in this process and on disk, keyed by everything that decides it,
so a new process reads it instead of running it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path

import torch

from unsee.impl.engine.kv import KVEngine

_ROWS_CHECKED: dict = {}


def row_independence(engine: KVEngine, context: int = 24, block: int = 16) -> tuple[bool, str]:
    """Does row i of a prefill (its logits and K/V) ignore the tokens after position i, bit for
    bit, on this model, dtype, device, attention implementation and thread count? The fixed
    point that defines a reply is unique only if it does. Two blocks that agree on their first
    half are prefilled after the same context and their first halves compared with torch.equal.
    Cached per configuration, in this process and on disk (`selftest_key`, `selftest_dir`), so a
    new process does not run it again. Returns (holds, a sentence for the user)."""
    model = engine.model
    impl = getattr(model.config, "_attn_implementation", None) or "eager"  # private to transformers' configs
    key = (id(model), str(next(model.parameters()).dtype), str(engine.device), engine.threads, impl, engine.kernel)
    if key in _ROWS_CHECKED:
        return _ROWS_CHECKED[key]
    disk = {**selftest_key(engine, impl), "shape": [context, block], **({"kernel": engine.kernel} if engine.kernel else {})}
    holds = read_selftest(disk)
    if holds is None:
        holds = _rows_independent(engine, context, block)
        write_selftest(disk, holds)
    note = ("row independence holds: a recorded reply is checked by one prefill" if holds else
            f"row independence does not hold on this backend ({impl}, {key[1]}, {key[2]}, {engine.threads} "
            "threads): replies are drafted by decoding and verified by prefill, and no recorded reply "
            "is reused (skipping refused)")
    _ROWS_CHECKED[key] = (holds, note)
    return holds, note


def _rows_independent(engine: KVEngine, context: int, block: int) -> bool:
    model = engine.model
    g = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    ctx = torch.randint(10, vocab, (context,), generator=g).tolist()
    a = torch.randint(10, vocab, (block,), generator=g).tolist()
    b = a[: block // 2] + torch.randint(10, vocab, (block - block // 2,), generator=g).tolist()
    e1 = KVEngine(model, engine.device, engine.threads, kernel=engine.kernel)
    e1.prefill(ctx)
    e2 = e1.clone()
    la, lb = e1.prefill_logits(a), e2.prefill_logits(b)
    half = context + block // 2  # the shared context and the blocks' common first half
    holds = torch.equal(la[: block // 2], lb[: block // 2]) and all(
        torch.equal(x[..., :half, :], y[..., :half, :])
        for p, q in zip(e1.kv_tensors(), e2.kv_tensors()) for x, y in zip(p, q))
    e1.release()
    e2.release()
    return holds


SELFTEST_VERSION = 1  # bump when the self-test itself changes: older results are then not read


def selftest_dir() -> Path:
    """Where self-test results live: `selftest/` beside the converted-weights cache ($UNSEE_CACHE_DIR,
    else $XDG_CACHE_HOME/unsee, else ~/.cache/unsee)."""
    from unsee.impl.engine.models import weights_cache_dir

    return weights_cache_dir().parent / "selftest"


def cpu_flags() -> str:
    """The CPU's feature flags (they pick the kernels): a digest of /proc/cpuinfo's flags where it
    exists, with the capability torch dispatches on and the machine type."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    # torch.backends.cpu.get_cpu_capability: only in some torch versions
    capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: "")()
    return f"{platform.machine()}|{capability}|{hashlib.sha256(flags.encode()).hexdigest()[:16]}"


def selftest_key(engine: KVEngine, impl: str) -> dict:
    """Everything that decides the self-test's bits: the weights (and the module that runs them),
    where they start (`models.ALIGNMENT`), dtype, device, kernel, threads, torch and transformers
    versions, CPU flags."""
    import transformers

    from unsee.impl.engine.models import ALIGNMENT, weights_digest

    model = engine.model
    # the digest memo unsee sets on a model object (a cache read, `Bundle.weights_sha256`): absent until then
    weights = getattr(model, "unsee_weights_sha256", None)
    if weights is None:
        weights = weights_digest(model)
        try:
            model.unsee_weights_sha256 = weights
        except (AttributeError, TypeError):
            pass
    device = engine.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
    return {"version": SELFTEST_VERSION, "weights_sha256": weights,
            "module": f"{type(model).__module__}.{type(model).__qualname__}",
            "dtype": str(next(model.parameters()).dtype), "device": f"{device.type}|{name}", "attn": impl,
            "threads": engine.threads, "torch": torch.__version__, "transformers": transformers.__version__,
            "cpu": cpu_flags(), "alignment": ALIGNMENT}


def _result_path(key: dict, prefix: str = "") -> Path:
    return selftest_dir() / (prefix + hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
                             + ".json")


def read_result(key: dict, prefix: str = "") -> dict | None:
    """A measurement stored for exactly this key (its fields), or None (none, unreadable, or
    another key). `prefix` names the kind of measurement in the file name."""
    try:
        doc = json.loads(_result_path(key, prefix).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("key") != key:
        return None
    return doc


def write_result(key: dict, fields: dict, prefix: str = "") -> None:
    """Store a measurement (atomically: readers see a whole file or none); a cache that cannot
    be written only costs the next process the measurement."""
    path = _result_path(key, prefix)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, **fields}, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass


def read_selftest(key: dict) -> bool | None:
    """A stored self-test result for exactly this key, or None."""
    doc = read_result(key)
    return doc["holds"] if doc is not None and isinstance(doc.get("holds"), bool) else None


def write_selftest(key: dict, holds: bool) -> None:
    write_result(key, {"holds": holds})
