"""Execution settings chosen by measurement on this machine, for a new store.

The attention kernel, the dtype and the thread count are part of a state's definition (the
store records them and every later process runs under them), so they are chosen once, when a
session is created: of the candidate settings whose premise self-test holds here
(`row_independence`: a reply's rows do not read later tokens, bit for bit), the one that runs a
forget's kind of work fastest. Each setting is its own state: bfloat16 gives other replies than
float32, and two threads other bits than one. The measurement is kept beside the self-test
results, keyed the same way (weights, dtype, device, threads, versions, CPU flags), so it is
taken once per model and machine.
"""

from __future__ import annotations

import time

KERNELS = ("eager", "sdpa")
DTYPES = ("float32", "bfloat16")
CONTEXT, BLOCK, BLOCKS = 768, 8, 4  # a long prefill, then short forwards at that context (a replay's mix)
ROUNDS = 2  # the settings measured in turn, each round; the fastest round of each counts
VERSION = 3  # bump when the probe changes: older measurements are then not read


def cores() -> int:
    """CPU cores this process may run on."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def candidates(attn: str = "auto", dtype: str = "auto", threads="auto", device: str | None = None) -> list[dict]:
    """The settings to choose among: each "auto" field takes every value that may run here
    (kernels: eager and sdpa; dtypes: float32 and bfloat16; threads: 1 and every core, on a CPU),
    any other value is kept as given."""
    from unsee.impl.engine import models

    on_cpu = models.pick_device(device).type == "cpu"
    ks = KERNELS if attn == "auto" else (attn,)
    ds = DTYPES if dtype == "auto" else (dtype,)
    ts = (sorted({1, cores()}) if on_cpu else [1]) if threads == "auto" else [int(threads)]
    return [{"attn": k, "dtype": d, "threads": t} for d in ds for k in ks for t in ts]


def label(c: dict) -> str:
    return f"{c['attn']}, {c['dtype']}, {c['threads']} thread(s)"


def choose(model: str, device: str | None = None, attn: str = "auto", dtype: str = "auto", threads="auto"
           ) -> tuple[dict, str]:
    """({"attn", "dtype", "threads"}, a sentence saying why) for a new store of `model`: of the
    `candidates`, the fastest on a CONTEXT-token prompt block plus BLOCKS forwards of BLOCK tokens
    after it (the best of ROUNDS rounds), among those whose self-test holds. With a single
    candidate nothing is measured. One (kernel, dtype) load is measured at a time, its thread
    counts in turn, so at most two loads are held (the best so far and the one measured); the
    losers are dropped from the load cache. The process's thread count is restored."""
    import torch

    from unsee.impl.engine import models
    from unsee.impl.engine.attention import gqa_kernel
    from unsee.impl.engine.kv import KVEngine
    from unsee.impl.engine.selftest import read_result, selftest_key, write_result

    if model == "reference":
        raise ValueError("the reference model has no kernel, dtype or threads to choose")
    cands = candidates(attn, dtype, threads, device)
    if len(cands) == 1:
        return cands[0], "as given"
    by_name = {label(c): c for c in cands}
    before = torch.get_num_threads()
    seconds: dict[str, float] = {}
    refused: list[str] = []
    fresh, best = False, None  # best: the (kernel, dtype) load kept
    try:
        for pair in dict.fromkeys((c["attn"], c["dtype"]) for c in cands):
            group = [c for c in cands if (c["attn"], c["dtype"]) == pair]
            engines = {}
            for c in group:
                e = KVEngine(models.load(model, c["dtype"], device, attn=c["attn"]).model,
                             models.pick_device(device), c["threads"])
                e.kernel = gqa_kernel(e)  # measured as a store would run it
                engines[label(c)] = e
            key = {"probe": [VERSION, CONTEXT, BLOCK, BLOCKS],
                   **{label(c): {**selftest_key(engines[label(c)], c["attn"]), "kernel": engines[label(c)].kernel}
                      for c in group}}
            cached = read_result(key, prefix="settings-")
            if cached is not None and isinstance(cached.get("seconds"), dict) \
                    and isinstance(cached.get("refused"), list):
                got, bad = cached["seconds"], cached["refused"]
            else:
                fresh = True
                got, bad = _measure(engines)
                write_result(key, {"seconds": got, "refused": bad}, prefix="settings-")
            for e in engines.values():
                e.release()
            seconds.update(got)
            refused += bad
            leader = by_name[min(seconds, key=seconds.get)] if seconds else None
            keep = None if leader is None else (leader["attn"], leader["dtype"])
            for drop in {pair, best} - {keep, None}:
                models.forget(model, drop[1], device, drop[0])
            best = keep
    finally:
        torch.set_num_threads(before)
    if not seconds:
        chosen = next((c for c in cands if c["attn"] == "eager" and c["dtype"] == "float32"), cands[0])
        return chosen, (f"the premise self-test fails for every candidate here ({'; '.join(refused)}): "
                        f"{label(chosen)}, with recorded replies never reused")
    timed = "; ".join(f"{name} {1000 * t:.0f} ms" for name, t in sorted(seconds.items(), key=lambda x: x[1]))
    why = (f"auto: the fastest here on a {CONTEXT}-token block and {BLOCKS} {BLOCK}-token forwards after it "
           f"({timed}; {'measured now' if fresh else 'measured earlier on this machine'})")
    if refused:
        why += f"; {'; '.join(refused)} refused: its self-test fails"
    return by_name[min(seconds, key=seconds.get)], why


def _measure(engines) -> tuple[dict, list]:
    import torch

    from unsee.impl.engine.exact import settle
    from unsee.impl.engine.selftest import row_independence

    refused = []
    for name, engine in engines.items():
        torch.set_num_threads(engine.threads)
        if not row_independence(engine)[0]:
            refused.append(name)
    probes = {}
    for name, engine in engines.items():
        if name in refused:
            continue
        torch.set_num_threads(engine.threads)
        config = engine.model.config
        # max_position_embeddings: not every transformers config class has it
        n = min(CONTEXT, getattr(config, "max_position_embeddings", CONTEXT + BLOCK * BLOCKS) - BLOCK * BLOCKS - 1)
        probes[name] = (n, torch.randint(10, config.vocab_size, (n + BLOCK * BLOCKS,),
                                         generator=torch.Generator().manual_seed(0)).tolist())
        engine.reset()
        engine.prefill(probes[name][1][:BLOCK])  # warm the kernel up
    seconds: dict[str, float] = {}
    for _ in range(ROUNDS):
        for name, (n, ids) in probes.items():
            engine = engines[name]
            torch.set_num_threads(engine.threads)
            engine.reset()
            settle(engine.device)
            t0 = time.perf_counter()
            engine.prefill(ids[:n], logits=False)  # a prompt block, as a forget prefills one
            for i in range(BLOCKS):
                engine.prefill(ids[n + i * BLOCK:n + (i + 1) * BLOCK])
            settle(engine.device)  # a GPU's kernels run after their launch returns
            seconds[name] = min(seconds.get(name, float("inf")), time.perf_counter() - t0)
    for engine in engines.values():
        engine.reset()
    return seconds, refused
