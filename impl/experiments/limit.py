"""The limit of a forget's own forwards, and a forget measured against it in a fresh process.

A forget's time is its forwards plus everything else (reading pages, the grammar, the
bookkeeping, the digests). `forward_limit` measures the first part alone: it replays the
forwards the engine ran during the forget (same kinds, sizes and cache positions, in order,
with the crops between them) back to back from the same restored state, timing only the
model calls. The forget's `seconds` over that time is the overhead factor: 1.0 would mean
the forget is nothing but its forwards.

`python -m unsee.impl.experiments.limit DB METHOD RECEIPT` forgets source "z" from a stored
session as `unsee forget` does (`forget_stored`, the store verified, the trace checked, the
result saved), then measures the limit in the same process and writes both to RECEIPT.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from unsee.specs.traces import Append, Begin, Crop, Forward, Reset

METHODS = ("B5", "B5'", "B7")


def forward_limit(rt) -> dict:
    """Replay the engine events of `rt`'s last forget on a copy of its engine; time the forwards.

    Every event runs again in order: a reset, a crop, a forward over the same number of tokens
    at the same position, and rows appended without compute (K/V pages read back, B5′'s prefix
    hits) copied from the forget's result, which holds the same rows at those positions (the
    shared prefix; zeros where they are another state's). Only the forwards are timed. The token ids are the result's context where
    it reaches (a rejected draft's ids are not kept; a dense forward's time does not depend on
    which ids it reads). Returns {forwards, tokens, seconds}; `rt` is left as it was."""
    import torch

    from unsee.impl.engine.exact import settle

    trace = rt.last_trace
    if trace is None:
        raise ValueError("the runtime recorded no forget: run one first")
    result = rt.engine
    ids = list(rt.model.bos) + [int(t) for t in rt.session.state.tokens]  # as the engine holds them
    engine = result.clone()
    engine.reset()

    def fill(start: int, n: int) -> None:  # rows appended without compute: the result's, else zeros
        if n and not len(engine):  # an empty cache has no layers to append to until a forward makes them
            engine.prefill(ids[:1])
            engine.crop(0, fresh_storage=False)
        shared = max(0, min(n, len(result) - start))
        if shared:
            engine.append_rows(result.cache, start, start + shared)
        if n > shared:  # rows of another state (R_T, before a forget crops it): never timed
            blank = result.rows(0, 1)
            engine.append_pages([blank.new_zeros(blank.shape[:3] + (n - shared,) + blank.shape[4:])])

    seconds, forwards, tokens = 0.0, 0, 0
    with torch.inference_mode():
        for e in trace.events:
            if isinstance(e, Begin):  # the engine as the forget found it (R_T, resident or not)
                fill(0, e.length)
            elif isinstance(e, Reset):
                engine.reset()
            elif isinstance(e, Crop):
                engine.crop(e.length, fresh_storage=False)
            elif isinstance(e, (Append, Forward)):
                if len(engine) != e.start:
                    raise ValueError(f"the trace's {type(e).__name__} at {e.start} does not follow the "
                                     f"engine's {len(engine)} positions")
                if isinstance(e, Append):
                    fill(e.start, e.n)
                    continue
                chunk = [ids[p] if p < len(ids) else ids[-1] for p in range(e.start, e.start + e.n)]
                x = torch.tensor([chunk], dtype=torch.long, device=engine.device)
                settle(engine.device)
                t0 = time.perf_counter()
                out = engine.call(x, **({} if e.logits else {"logits_to_keep": 1}))  # the forget's kernel
                out.logits[0, -1].float()  # what every forward of the engine reads back
                settle(engine.device)  # a GPU's kernels run after their launch returns
                seconds += time.perf_counter() - t0
                forwards += 1
                tokens += e.n
    engine.release()
    return {"forwards": forwards, "tokens": tokens, "seconds": round(seconds, 4)}


def forget_and_limit(db: Path, method: str, source: str = "z") -> dict:
    """`unsee forget` on a stored session, then the limit of its own forwards (same process)."""
    from unsee.impl.store.agent import forget_stored
    from unsee.impl.store.sqlite import Store

    store = Store(db)
    try:
        rt, doc = forget_stored(store, [source], method)
    finally:
        store.close()
    t0 = time.perf_counter()
    doc["limit"] = forward_limit(rt) if rt.name == "kv" else None  # a KVEngine's forwards; none on the reference model
    if doc["limit"] is not None:
        doc["limit"]["wall_seconds"] = round(time.perf_counter() - t0, 4)  # the measurement, not the forget
    return doc


def forget_in_process(db: Path, method: str, receipt: Path, timeout: float = 3600) -> dict:
    """`forget_and_limit` in a fresh interpreter (nothing resident: B7 reads R_c back from the
    stored K/V pages, B5′ reads R_T). Returns its document and the process's wall time."""
    from unsee.impl.experiments.bench_cross import run_process

    doc, wall = run_process(["unsee.impl.experiments.limit", str(db), method, str(receipt)], receipt, timeout)
    # the process as `unsee forget` would run it: its wall time less the limit's measurement
    doc["process_seconds"] = round(wall - ((doc.get("limit") or {}).get("wall_seconds") or 0.0), 4)
    return doc


def store_agent_session(folder: Path, model: str, T: int, reply: int = 8, attn: str = "eager", threads: int = 1,
                        dtype: str = "float32") -> dict:
    """The agent shape (`agent_session`: a tool-schema system prompt, the target 12 turns from
    the end) run live and stored in `folder`/session.db (created) as `unsee run` stores it.
    Returns {settings (read back from the store), context_tokens, run_seconds}."""
    from unsee.impl.experiments.bench_sessions import agent_session, live_session
    from unsee.impl.store.digests import stored_settings
    from unsee.impl.store.sqlite import Store

    folder.mkdir()
    t0 = time.perf_counter()
    live = live_session(model, agent_session(T, None, 0.0, reply)[0], reply, attn, threads, dtype)
    run_seconds = time.perf_counter() - t0
    store = Store(folder / "session.db", create=True)
    try:
        store.save(live.session, model, live.model, dict(live.digest()))
        settings = stored_settings(store)
    finally:
        store.close()
    return {"settings": settings, "context_tokens": len(live.session.state.tokens), "run_seconds": run_seconds}


def side_by_side(model: str, T: int, repeats: int = 3, reply: int = 8, attn: str = "eager", workdir=None,
                 on_step=None, threads: int = 1, dtype: str = "float32") -> dict:
    """The agent shape (`agent_session`: a tool-schema system prompt, the target 12 turns from
    the end) run once and stored as `unsee run` stores it; then B5, B5′ and B7 each forget the
    target from their own copy of the store in a fresh process, `repeats` times, interleaved
    (B5, B5′, B7, B5, ...) so that a slow spell of the machine falls on every method. Each run
    also measures the limit of its own forwards. `attn`: the kernel the session is run and
    stored under (every forget then runs under it), `threads` and `dtype` likewise. on_step(label) after each stage."""
    from unsee.impl.experiments.bench_sessions import AGENT_SYSTEM, load_template, machine

    runs: dict[str, list[dict]] = {m: [] for m in METHODS}
    with tempfile.TemporaryDirectory(prefix="unsee-limit-", dir=workdir) as tmp:
        stored = Path(tmp) / "stored"
        session = store_agent_session(stored, model, T, reply, attn, threads, dtype)
        settings = session["settings"]  # what every forget process will run under
        if on_step:
            on_step("run")
        for i in range(repeats):
            for m in METHODS:
                copy = Path(tmp) / f"{m}-{i}"
                shutil.copytree(stored, copy)
                runs[m].append(forget_in_process(copy / "session.db", m, copy / "receipt.json"))
                shutil.rmtree(copy)
                if on_step:
                    on_step(m)
    digests = {m: rs[-1]["digests"] for m, rs in runs.items()}
    return {"model": model, "shape": "agent", "T": T, "attn": attn, "threads": settings["threads"],
            "dtype": settings["dtype"], "reply_tokens": reply, "repeats": repeats,
            "system_prompt_tokens": len(load_template(model).block("system", AGENT_SYSTEM)),
            "context_tokens": session["context_tokens"], "run_seconds": round(session["run_seconds"], 2),
            "bit_exact": all(d == digests["B5"] for d in digests.values()), "machine": machine(),
            "methods": {m: summarize(rs) for m, rs in runs.items()}}


COUNTS = ("transitions", "tau", "checkpoint", "tokens_prefilled", "tokens_decoded", "tokens_verified",
          "tokens_rematerialized", "tokens_restored", "tokens_reused")
TIMES = ("seconds", "import_seconds", "open_seconds", "save_seconds", "process_seconds")


def summarize(runs: list[dict]) -> dict:
    """One method's runs: its counts (the same in every run: F is deterministic, so they are
    checked equal), the median, min and max of each time, and the limit of its forwards."""
    first = runs[0]
    for r in runs[1:]:
        differ = [k for k in COUNTS if r.get(k) != first.get(k)]
        if differ or r["digests"] != first["digests"]:
            raise RuntimeError(f"two runs of {first['method']} on copies of one store differ in "
                               f"{differ or ['digests']}: the forget is not deterministic")
    out = {k: first.get(k) for k in COUNTS}
    out["tokens_computed"] = sum(first.get(k, 0) for k in ("tokens_prefilled", "tokens_decoded", "tokens_verified",
                                                           "tokens_rematerialized"))
    for k in TIMES + ("limit_seconds",):
        xs = [r["limit"]["seconds"] if k == "limit_seconds" else r[k] for r in runs]
        out[k] = {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}
    out["limit_forwards"] = first["limit"]["forwards"]
    out["limit_tokens"] = first["limit"]["tokens"]
    # each run against its own forwards, so that the machine's speed in that run cancels
    ratios = [r["seconds"] / r["limit"]["seconds"] for r in runs if r["limit"]["seconds"]]
    out["over_limit"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)} if ratios else None
    return out


def side_by_side_report(doc: dict) -> list:
    """The table and the headline of a `side_by_side` run."""
    from unsee.impl.experiments.reports import Tab

    ms = doc["methods"]
    b5, b5p, b7 = ms["B5"], ms["B5'"], ms["B7"]
    t = Tab(f"{doc['model']}: forget a tool result {doc['T'] - b7['tau'] + 1} turns from the end of {doc['T']} "
            f"({doc['system_prompt_tokens']}-token tool prompt, {doc['context_tokens']} tokens), {doc['attn']} "
            f"attention, {doc.get('dtype', 'float32')}, {doc.get('threads', 1)} thread(s), fresh processes",
            ("method", "seconds", "forwards s", "×", "forwards", "computed", "restored", "reused", "F", "open s",
             "process s"))
    for m, d in ms.items():
        t.add(m, f"{d['seconds']['median']:.2f}", f"{d['limit_seconds']['median']:.2f}",
              "—" if d["over_limit"] is None else f"{d['over_limit']['median']:.2f}",
              str(d["limit_forwards"]), str(d["tokens_computed"]), str(d["tokens_restored"]), str(d["tokens_reused"]),
              str(d["transitions"]), f"{d['open_seconds']['median']:.2f}", f"{d['process_seconds']['median']:.1f}")
    t.notes.append(f"medians of {doc['repeats']} run(s). seconds: the receipt's (restore, replay, checks; "
                   + ", ".join(f"{m} {d['seconds']['min']:.2f}–{d['seconds']['max']:.2f}" for m, d in ms.items())
                   + "). forwards s: the same forwards replayed back to back from the same restored state, only the "
                   "model calls timed; ×: seconds ÷ forwards s, per run. computed: tokens some forward computed. "
                   "restored: rows read from K/V pages; reused: rows taken from B5′'s prefix cache. F: transitions. "
                   "open s: the store verified and the model loaded; process s: the whole process, interpreter, "
                   "imports of torch and transformers (median "
                   + ", ".join(f"{m} {d['import_seconds']['median']:.1f} s" for m, d in ms.items())
                   + "), open, forget and save."
                   + (" Ran on {cpu}, {cores} cores, torch {torch}.".format(**doc["machine"]) if "machine" in doc else ""))
    ratio = b5["seconds"]["median"] / b7["seconds"]["median"]
    over = "—" if b7["over_limit"] is None else f"{b7['over_limit']['median']:.2f}×"
    head = (f"B5/B7 = {ratio:.1f}× in seconds and {b5['tokens_computed'] / max(1, b7['tokens_computed']):.1f}× in "
            f"tokens computed; B7 at {over} the time of its own forwards; "
            f"B5′/B7 = {b5p['seconds']['median'] / b7['seconds']['median']:.1f}×; "
            f"{'bit-exact: every method left the same state digests' if doc['bit_exact'] else 'NOT BIT-EXACT'}")
    return [t, head]


def plot_side_by_side(docs: list[dict], path) -> None:
    """One panel per model: each method's receipt seconds as its own forwards plus the rest."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(docs), figsize=(5 * len(docs), 4), squeeze=False)
    for ax, doc in zip(axes[0], docs):
        names = list(doc["methods"])
        fwd = [doc["methods"][m]["limit_seconds"]["median"] for m in names]
        total = [doc["methods"][m]["seconds"]["median"] for m in names]
        over = [doc["methods"][m]["over_limit"] for m in names]  # as the table has it: the median of per-run ratios
        rest = [max(0.0, a - b) for a, b in zip(total, fwd)]
        ax.bar(names, fwd, color="#4c72b0", label="its own forwards")
        ax.bar(names, rest, bottom=fwd, color="#dd8452", label="everything else")
        for i, (a, o) in enumerate(zip(total, over)):
            ax.text(i, a, f"{a:.2f} s\n{o['median']:.2f}×" if o else f"{a:.2f} s", ha="center", va="bottom", fontsize=8)
        ax.set_ylim(0, max(total) * 1.25)
        ax.set_ylabel("receipt seconds (median)")
        ax.set_title(f"{doc['model']}, T={doc['T']}, {doc['context_tokens']} tokens, {doc['attn']} attention",
                     fontsize=9)
        ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> None:  # pragma: no cover - run as a process by the bench
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3 or argv[1] not in METHODS:
        raise SystemExit(f"usage: python -m unsee.impl.experiments.limit DB {{{','.join(METHODS)}}} RECEIPT")
    doc = forget_and_limit(Path(argv[0]), argv[1])
    Path(argv[2]).write_text(json.dumps(doc, indent=1))

if __name__ == "__main__":  # pragma: no cover
    main()
