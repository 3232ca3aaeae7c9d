"""The determinism soak: forget (new process) → check (new process), N times, under CPU load.

A stored session is forgotten from, in a fresh interpreter, on a fresh copy of the store, and a
full reset in another fresh interpreter re-derives the state and compares every layer. A B5
forget of the same copy is the reference state. Any iteration that is not exact keeps
everything needed to diagnose it: both stores, the receipts and check reports, the layers that
differ, the first differing K/V position (layer, K or V, head, token, dim) and the execution
environment (threads, kernel, dtype, device, library versions, CPU, thread variables, load).

    unsee soak --model smollm2 --turns 30 --iterations 20 --load 1 --out soak/ --json soak.json
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from unsee.impl.experiments.bench_sessions import AGENT_SUFFIX, agent_session, cpu_model
from unsee.impl.store.episode import write_episode
from unsee.impl.store.sqlite import copy_store

ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
            "ATEN_CPU_CAPABILITY", "CUBLAS_WORKSPACE_CONFIG")


def _unsee(*args, timeout: float = 7200) -> tuple[int, str, float]:
    cmd = [sys.executable, "-m", "unsee.impl.cli", *map(str, args)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr, time.perf_counter() - t0


def loadavg() -> float | None:
    """The 1-minute load average: how many processes competed for the cores (besides `load`)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def environment(db: Path, load: int) -> dict:
    from unsee.impl.store.sqlite import Store

    st = Store(db)
    try:
        identity = st.identity
    finally:
        st.close()
    return {"identity": identity, "cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
            "env": {k: os.environ.get(k) for k in ENV_VARS}, "load_processes": load}


def first_difference(a_db: Path, b_db: Path) -> dict:
    """Open two stores of one session, bring back each one's R_T cache from its own K/V pages,
    and find the layers whose digests differ and the first K/V element that differs."""
    import torch

    from unsee.impl.store.agent import open_runtime
    from unsee.impl.store.sqlite import Store
    from unsee.model.state import layer_digests

    caches, digests = [], []
    for db in (a_db, b_db):
        st = Store(db)
        try:
            rt = open_runtime(st)
            s = rt.session
            rt.model.rebuild(s.state.tokens, s.state.blocks)
            caches.append([(k.clone(), v.clone()) for k, v in rt.engine.kv_tensors()])
            digests.append(layer_digests(s.state))
        finally:
            st.close()
    layers = sorted(k for k in digests[0] if k != "kv" and digests[0][k] != digests[1].get(k))
    out: dict = {"layers": layers, "kv_layers_differ": [], "first": None}
    for i, ((ka, va), (kb, vb)) in enumerate(zip(*caches)):
        for name, x, y in (("K", ka, kb), ("V", va, vb)):
            if x.shape != y.shape:
                out["kv_layers_differ"].append(i)
                out["first"] = out["first"] or {"layer": i, "tensor": name, "shapes": [list(x.shape), list(y.shape)]}
            elif not torch.equal(x, y):
                out["kv_layers_differ"].append(i)
                if out["first"] is None:
                    pos = (x != y).nonzero()[0].tolist()  # [batch, head, token, dim]
                    out["first"] = {"layer": i, "tensor": name, "head": pos[1], "token": pos[2], "dim": pos[3],
                                    "a": x[tuple(pos)].item(), "b": y[tuple(pos)].item()}
    out["kv_layers_differ"] = sorted(set(out["kv_layers_differ"]))
    return out


def soak(model: str = "tiny-llama", turns: int = 30, iterations: int = 20, load: int = 1, out: Path = Path("soak"),
         method: str = "B7", on_iteration=None) -> dict:
    """Run the soak; returns its report (failures keep their folders under `out`)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    base = out / "stored"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    obs, _ = agent_session(turns, turns - AGENT_SUFFIX + 1)
    write_episode(base / "episode.jsonl", obs)
    code, text, run_s = _unsee("run", base / "episode.jsonl", "--db", base / "session.db", "--model", model)
    if code != 0:
        raise RuntimeError(f"unsee run failed:\n{text[-3000:]}")
    env = environment(base / "session.db", load)
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
    rows = []
    try:
        for i in range(iterations):
            work = out / f"iteration-{i:03d}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            copy_store(base / "session.db", work / "session.db")
            fcode, ftext, forget_s = _unsee("forget", "--db", work / "session.db", "--source", "z", "--method",
                                            method, "--json", work / "receipt.json")
            ccode, ctext, check_s = _unsee("check", "--db", work / "session.db", "--json", work / "check.json") \
                if fcode == 0 else (None, "", 0.0)
            row = {"iteration": i, "forget_exit": fcode, "check_exit": ccode, "forget_process_seconds": round(forget_s, 2),
                   "check_process_seconds": round(check_s, 2), "loadavg": loadavg()}
            if fcode == 0:
                receipt = json.loads((work / "receipt.json").read_text())
                row.update({k: receipt.get(k) for k in ("seconds", "open_seconds", "save_seconds", "integrity_seconds",
                                                        "transitions", "tau", "T")})
            row["exact"] = fcode == 0 and ccode == 0
            if row["exact"]:
                shutil.rmtree(work)
            else:  # keep everything: the two states, what differs, where, and the environment
                (work / "forget.log").write_text(ftext)
                (work / "check.log").write_text(ctext)
                copy_store(base / "session.db", work / "reference.db")
                rcode, rtext, _ = _unsee("forget", "--db", work / "reference.db", "--source", "z", "--method", "B5",
                                         "--json", work / "reference-receipt.json")
                diag = {"environment": env, "reference_forget_exit": rcode}
                if fcode == 0 and rcode == 0:
                    diag["difference"] = first_difference(work / "session.db", work / "reference.db")
                (work / "diagnosis.json").write_text(json.dumps(diag, indent=1))
                row["kept"] = str(work)
            rows.append(row)
            if on_iteration:
                on_iteration(row)
    finally:
        for b in burners:
            b.kill()
            b.wait()
    failures = [r for r in rows if not r["exact"]]
    totals = [r["open_seconds"] + r["seconds"] + r["save_seconds"] for r in rows if r.get("seconds") is not None]
    integrity = [r["integrity_seconds"] for r in rows if r.get("integrity_seconds") is not None]
    return {"model": model, "turns": turns, "iterations": iterations, "method": method, "environment": env,
            "run_process_seconds": round(run_s, 2), "failures": len(failures),
            "failure_rate": len(failures) / max(1, len(rows)),
            "integrity_share": round(sum(integrity) / sum(totals), 4) if totals else None,
            "rows": rows}
