"""Execution settings chosen by measurement on this machine, for a new store.

The attention kernel is part of a state's definition (the store records it and every later
process runs under it), so it is chosen once, when a session is created: of the kernels
whose premise self-test holds here (`row_independence`: a reply's rows do not read later
tokens, bit for bit), the one that runs a forget's kind of work faster. The measurement is
kept beside the self-test results, keyed the same way (weights, dtype, device, threads,
versions, CPU flags), so it is taken once per model and machine.
"""

from __future__ import annotations

import time

KERNELS = ("eager", "sdpa")
CONTEXT, BLOCK, BLOCKS = 768, 8, 4  # a long prefill, then short forwards at that context (a replay's mix)
ROUNDS = 2  # the kernels measured in turn, each round; the fastest round of each counts
VERSION = 2  # bump when the probe changes: older measurements are then not read


def choose_attn(model: str, dtype: str = "float32", device: str | None = None, threads: int = 1) -> tuple[str, str]:
    """(kernel, a sentence saying why) for a new store of `model`: the faster of KERNELS on a
    CONTEXT-token prompt block plus BLOCKS forwards of BLOCK tokens after it (the best of
    ROUNDS rounds, the kernels in turn), among those whose self-test holds. The losing
    kernel's weights are dropped from the load cache."""
    from unsee.impl.engine import models
    from unsee.impl.engine.attention import gqa_kernel
    from unsee.impl.engine.kv import KVEngine
    from unsee.impl.engine.selftest import read_result, selftest_key, write_result

    engines = {k: KVEngine(models.load(model, dtype, device, attn=k).model, models.pick_device(device), threads)
               for k in KERNELS}
    for e in engines.values():
        e.kernel = gqa_kernel(e)  # measured as a store would run it
    key = {"probe": [VERSION, CONTEXT, BLOCK, BLOCKS],
           **{k: {**selftest_key(e, k), "kernel": e.kernel} for k, e in engines.items()}}
    cached = read_result(key, prefix="attn-")
    if cached is not None and isinstance(cached.get("seconds"), dict) and isinstance(cached.get("refused"), list):
        seconds, refused = cached["seconds"], cached["refused"]
    else:
        cached = None
        seconds, refused = _measure(engines)
        write_result(key, {"seconds": seconds, "refused": refused}, prefix="attn-")
    for e in engines.values():
        e.release()
    if not seconds:
        for kernel in KERNELS[1:]:
            models.forget(model, dtype, device, kernel)
        return "eager", (f"the premise self-test fails for every kernel here ({', '.join(refused)}): eager, with "
                         "recorded replies never reused")
    best = min(seconds, key=seconds.get)
    for kernel in KERNELS:
        if kernel != best:
            models.forget(model, dtype, device, kernel)
    timed = ", ".join(f"{k} {1000 * s:.0f} ms" for k, s in seconds.items())
    why = (f"auto: the faster kernel here on a {CONTEXT}-token block and {BLOCKS} {BLOCK}-token forwards after it "
           f"({timed}; {'measured earlier on this machine' if cached is not None else 'measured now'})")
    if refused:
        why += f"; {', '.join(refused)} refused: its self-test fails"
    return best, why


def _measure(engines) -> tuple[dict, list]:
    import torch

    from unsee.impl.engine.selftest import row_independence

    refused = [k for k, e in engines.items() if not row_independence(e)[0]]
    probes = {}
    for kernel, engine in engines.items():
        if kernel in refused:
            continue
        config = engine.model.config
        n = min(CONTEXT, getattr(config, "max_position_embeddings", CONTEXT + BLOCK * BLOCKS) - BLOCK * BLOCKS - 1)
        probes[kernel] = (n, torch.randint(10, config.vocab_size, (n + BLOCK * BLOCKS,),
                                           generator=torch.Generator().manual_seed(0)).tolist())
        engine.reset()
        engine.prefill(probes[kernel][1][:BLOCK])  # warm the kernel up
    seconds: dict[str, float] = {}
    for _ in range(ROUNDS):
        for kernel, (n, ids) in probes.items():
            engine = engines[kernel]
            engine.reset()
            t0 = time.perf_counter()
            engine.prefill(ids[:n], logits=False)  # a prompt block, as a forget prefills one
            for i in range(BLOCKS):
                engine.prefill(ids[n + i * BLOCK:n + (i + 1) * BLOCK])
            seconds[kernel] = min(seconds.get(kernel, float("inf")), time.perf_counter() - t0)
    for engine in engines.values():
        engine.reset()
    return seconds, refused
