"""Execution settings chosen by measurement on this machine, for a new store.

The attention kernel is part of a state's definition (the store records it and every later
process runs under it), so it is chosen once, when a session is created: of the kernels
whose premise self-test holds here (`row_independence`: a reply's rows do not read later
tokens, bit for bit), the one whose prefill of a long block is faster.
"""

from __future__ import annotations

import time

KERNELS = ("eager", "sdpa")
PROBE_TOKENS = 512  # a long block: where the kernels differ (short ones cost the same)


def choose_attn(model: str, dtype: str = "float32", device: str | None = None, threads: int = 1,
                tokens: int = PROBE_TOKENS) -> tuple[str, str]:
    """(kernel, a sentence saying why) for a new store of `model`: the faster of KERNELS on a
    `tokens`-token prefill (best of two, after a warm-up) among those whose self-test holds.
    The losing kernel's weights are dropped from the load cache."""
    import torch

    from unsee.impl.engine import models
    from unsee.impl.engine.kv import KVEngine, row_independence

    seconds, refused = {}, []
    for kernel in KERNELS:
        bundle = models.load(model, dtype, device, attn=kernel)
        engine = KVEngine(bundle.model, bundle.device, threads)
        holds, _ = row_independence(engine)
        if not holds:
            refused.append(kernel)
            continue
        vocab = bundle.model.config.vocab_size
        n = min(tokens, getattr(bundle.model.config, "max_position_embeddings", tokens) - 1)
        ids = torch.randint(10, vocab, (n,), generator=torch.Generator().manual_seed(0)).tolist()
        times = []
        for _ in range(3):  # the first warms the kernel up; the best of the other two counts
            engine.reset()
            t0 = time.perf_counter()
            engine.prefill(ids)
            times.append(time.perf_counter() - t0)
        engine.release()
        seconds[kernel] = min(times[1:])
    if not seconds:
        return "eager", (f"the premise self-test fails for every kernel here ({', '.join(refused)}): eager, with "
                         "recorded replies never reused")
    best = min(seconds, key=seconds.get)
    for kernel in KERNELS:
        if kernel != best:
            models.forget(model, dtype, device, kernel)
    timed = ", ".join(f"{k} {1000 * s:.0f} ms" for k, s in seconds.items())
    why = f"auto: the faster kernel on a {n}-token prefill here ({timed})"
    if refused:
        why += f"; {', '.join(refused)} refused: its self-test fails"
    return best, why
