"""The store at realistic lengths: bytes per turn and the cost of a forget at a fixed suffix,
each forget in a new process on a stored session, as users run it.

A forget reads what it needs and rewrites only what follows its splice point, so at a fixed
suffix its cost should not track T; bytes per turn should not depend on T either.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from unsee.model.state import Observation, Part

REQUESTS = ("Find the cheapest flight to Lisbon next week.", "What is on my calendar tomorrow?",
            "Draft a short reply to the last email from Ana.", "Add milk and eggs to the shopping list.")
TOOL_RESULTS = ("3 results: TAP 212 EUR, Ryanair 89 EUR, easyJet 104 EUR.", "09:00 standup; 13:00 lunch with Sam.",
                "Email from Ana: can we move the review to Friday?", "Shopping list updated: 6 items.")


def store_session(T: int, tau: int, compact_every: int = 0) -> list[Observation]:
    """T observations of an assistant session. Without compaction (compact_every=0) the
    context, and so the per-state size, grows with t: the worst case for a store that keeps
    every R_t whole, and a restore of R_{τ−1} that reads a context as long as the session.
    compact_every=K compacts once in every K turns before τ (at the first user turn from each
    multiple of K: only a user turn asks for a summary), so the context stays bounded and only
    the log and the graph grow with T. The target is a memory fact at τ; a consequential call
    every 10 turns."""
    obs = [Observation("system", (Part("sys", "You are a careful personal assistant."),))]
    due = compact_every or T + 1  # the turn from which the next compaction is due
    for t in range(2, T + 1):
        i = t % len(REQUESTS)
        if t == tau:
            obs.append(Observation("memory", (Part("z", "The user's passport number is X4417202."),)))
        elif t % 3 == 0:
            obs.append(Observation("tool", (Part(f"r{t}", TOOL_RESULTS[i]),), reply=6))
        else:
            compact = t >= due and t < tau
            if compact:
                due = (t // compact_every + 1) * compact_every
            obs.append(Observation("user", (Part(f"u{t}", REQUESTS[i]),), reply=8,
                                   tool="send" if t % 10 == 0 else ("lookup" if t % 7 == 0 else None), compact=compact))
    return obs


def _forget_in_new_process(db: Path, out: Path) -> tuple[float, dict]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "unsee.impl.cli", "forget", "--db", str(db), "--source", "z",
                        "--json", str(out)], capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"forget failed on {db}:\n{p.stdout}\n{p.stderr}")
    return wall, json.loads(out.read_text())


def _forget_in_this_process(db: Path) -> float:
    """An agent that stays up: the stored session already open, the forget and its save timed."""
    from unsee.impl.store.agent import forget_stored, open_runtime
    from unsee.impl.store.sqlite import Store

    st = Store(db)
    try:
        rt = open_runtime(st)
        t0 = time.perf_counter()
        forget_stored(st, ["z"], rt=rt, head=rt.root)
        return time.perf_counter() - t0
    finally:
        st.close()


def store_scaling(Ts=(100, 200, 400, 800), suffix: int = 12, repeats: int = 2, on_point=None,
                  compact_every: int = 0) -> dict:
    """Bytes per turn (K/V pages excluded: the reference model keeps none) and forget cost at
    T−τ+1 = suffix, for each T: each forget in a fresh process on a copy of the store (open,
    forget and save timed apart), and in this process on a store already open."""
    from unsee.impl.engine.kv_runtime import make_runtime
    from unsee.impl.store.sqlite import Store

    rows = []
    with tempfile.TemporaryDirectory() as d:
        for T in Ts:
            rt = make_runtime("reference")
            t0 = time.perf_counter()
            for o in store_session(T, T - suffix + 1, compact_every):
                rt.step(o)
            run_s = time.perf_counter() - t0
            db = Path(d) / f"T{T}.db"
            st = Store(db, create=True)
            t0 = time.perf_counter()
            st.save(rt.session, "reference", rt.model, dict(rt.digest()))
            save_s = time.perf_counter() - t0
            _, page_bytes, _ = st.page_bytes()
            st.close()
            size = db.stat().st_size - page_bytes
            runs = []
            for k in range(repeats):
                copy = Path(d) / f"T{T}-{k}.db"
                copy.write_bytes(db.read_bytes())
                wall, receipt = _forget_in_new_process(copy, Path(d) / "r.json")
                runs.append({"process_seconds": round(wall, 3), "receipt_seconds": receipt["seconds"],
                             "open_seconds": receipt["open_seconds"], "save_seconds": receipt["save_seconds"],
                             "transitions": receipt["transitions"]})
                os.remove(copy)
                copy.write_bytes(db.read_bytes())
                runs[-1]["agent_seconds"] = round(_forget_in_this_process(copy), 4)
                os.remove(copy)
            inproc = [r["open_seconds"] + r["receipt_seconds"] + r["save_seconds"] for r in runs]
            rows.append({"T": T, "tau": T - suffix + 1, "bytes": size, "bytes_per_turn": round(size / T, 1),
                         "context_tokens": len(rt.session.states[T - suffix].tokens),
                         "run_seconds": round(run_s, 3), "save_seconds": round(save_s, 3),
                         "forget_seconds": round(min(inproc), 4), "forget_process_seconds": min(r["process_seconds"] for r in runs),
                         "agent_forget_seconds": min(r["agent_seconds"] for r in runs),
                         "runs": runs})
            if on_point:
                on_point(rows[-1])
    base = rows[0]
    for r in rows:
        r["forget_ratio_vs_first"] = round(r["forget_seconds"] / base["forget_seconds"], 2)
        r["process_ratio_vs_first"] = round(r["forget_process_seconds"] / base["forget_process_seconds"], 2)
        r["agent_ratio_vs_first"] = round(r["agent_forget_seconds"] / base["agent_forget_seconds"], 2)
    return {"model": "reference", "suffix": suffix, "repeats": repeats, "compact_every": compact_every, "rows": rows}
