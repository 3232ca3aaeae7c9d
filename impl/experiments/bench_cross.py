"""The cost law across processes: each agent-shape session stored as `unsee run` stores it,
then forgotten by `unsee forget` in a fresh interpreter per method, so nothing is resident and
B7 reads its checkpoint back from the store (B5′ its prefix cache)."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from unsee.impl.experiments.bench_sessions import agent_session, live_session

CROSS_METHODS = ("B5", "B5'", "B7")  # what `unsee forget` accepts


def run_process(args: list[str], out: Path, timeout: float = 3600) -> tuple[dict, float]:
    """`python -m args…` in a fresh interpreter, which writes a JSON document to `out`: the
    document and the process's wall time (interpreter start, imports and model load included)."""
    cmd = [sys.executable, "-m", *args]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return json.loads(out.read_text()), wall


def forget_in_new_process(db: Path, method: str, receipt: Path, source: str = "z", timeout: float = 3600) -> dict:
    """`unsee forget` on a stored session in a fresh interpreter: nothing is resident, so B7
    reads R_{τ−1} back from the stored K/V pages (B5′ reads R_T, its prefix cache). Returns the
    receipt and the process's wall time."""
    doc, wall = run_process(["unsee.impl.cli", "forget", "--db", str(db), "--source", source, "--method", method,
                             "--json", str(receipt)], receipt, timeout)
    return {"receipt": doc, "process_seconds": wall}


def differing_layers(digests: dict) -> dict[str, list[str]]:
    """{method: the layers whose digest differs from B5's} for each method that differs (a
    method without digests differs in every layer B5 has)."""
    ref = digests.get("B5") or {}
    out = {}
    for m, d in digests.items():
        if m == "B5":
            continue
        layers = sorted(k for k in ref.keys() | (d or {}).keys() if (d or {}).get(k) != ref.get(k))
        if layers:
            out[m] = layers
    return out


def _median_or_none(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def cross_process(model: str, T: int, tau: int, indeps, reply: int, repeats: int = 1, workdir=None,
                  on_point=None) -> list[dict]:
    """The agent shape across processes: run each session once, store it as `unsee run` does,
    then forget z from a copy of the store per method (and repeat) with `unsee forget` in a
    fresh process. Counts come from the receipts; times are medians over the repeats."""
    from unsee.impl.store.sqlite import Store

    rows = []
    with tempfile.TemporaryDirectory(prefix="unsee-cost-law-", dir=workdir) as tmp:
        for indep in indeps:
            obs, independent = agent_session(T, tau, indep, reply)
            live = live_session(model, obs, reply)
            base = Path(tmp) / f"indep-{indep}"
            (base / "stored").mkdir(parents=True)
            store = Store(base / "stored" / "session.db", create=True)
            store.save(live.session, model, live.model, dict(live.digest()))
            store.close()
            row = {"indep": indep, "T": T, "tau": tau, "suffix": T - tau + 1, "independent_turns": sorted(independent),
                   "stored_bytes": sum(f.stat().st_size for f in (base / "stored").iterdir() if f.is_file())}
            digests = {}
            for m in CROSS_METHODS:
                runs = []
                for i in range(repeats):
                    copy = base / f"{m}-{i}"
                    shutil.copytree(base / "stored", copy)  # the store's whole folder: any side files travel too
                    runs.append(forget_in_new_process(copy / "session.db", m, copy / "receipt.json"))
                r = runs[-1]["receipt"]
                digests[m] = r.get("digests")
                row[m] = {"seconds": _median_or_none([x["receipt"].get("seconds") for x in runs]),
                          "process_seconds": _median_or_none([x["process_seconds"] for x in runs]),
                          "load_seconds": _median_or_none([x["receipt"].get("load_seconds") for x in runs]),
                          "open_seconds": _median_or_none([x["receipt"].get("open_seconds") for x in runs]),
                          "save_seconds": _median_or_none([x["receipt"].get("save_seconds") for x in runs]),
                          "tokens_restored": r.get("tokens_restored"),
                          "replies": r.get("replies"), "replies_skipped": r.get("replies_skipped"),
                          "transitions": r["transitions"], "tokens_prefilled": r["tokens_prefilled"],
                          "tokens_decoded": r["tokens_decoded"], "tokens_rematerialized": r["tokens_rematerialized"],
                          "tokens_verified": r.get("tokens_verified", 0), "tokens_reused": r.get("tokens_reused", 0),
                          "recomputed": r["tokens_prefilled"] + r["tokens_decoded"] + r.get("tokens_verified", 0)
                          + r["tokens_rematerialized"],
                          "tau": r["tau"], "T": r["T"], "checkpoint": r["checkpoint"]}
            row["digests"] = digests
            row["digests_differ"] = differing_layers(digests)
            row["digests_equal"] = digests["B5"] is not None and not row["digests_differ"]
            rows.append(row)
            if on_point:
                on_point()
    return rows
