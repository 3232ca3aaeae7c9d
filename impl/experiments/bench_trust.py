"""What trust costs: the keyed seal and the ledger, per step and per forget, and the ledger check an
open makes, as shares of the work they guard.

Three measurements (`unsee bench trust`):

- **per step and per forget** on a stored agent session of `model` (SmolLM2 by default): the seconds
  inside the seal (`digests.seal`: the rows' digests and the root, HMAC-SHA256 under a key),
  inside the K/V pages' digests (`digests.page_digest`, one per page written), inside the ledger
  append (`Ledger.append`: one JSON line, fsynced) and inside any check against the ledger
  (`anchor.check`), against the step's and the forget's wall time.
  The same session is run twice, with a key and without one (SHA-256 checksums), so the key's own
  cost is the difference;
- **the open-time check** of a store with `turns` saves (one ledger record each, reference model):
  `Store(path)` then `verify()` with the ledger check (`anchor.check`) and without it
  (`anchored=False`), the fastest of `repeats`.

Times are wall-clock on whatever machine runs it; the tests assert counts only.
"""

from __future__ import annotations

import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from unsee.impl.experiments.bench_store import store_session
from unsee.impl.experiments.timing import Stopwatch, timing


@contextmanager
def store_timing(watch: Stopwatch):
    """Route the store's seal, page digests, ledger appends and ledger checks through `watch` (patched
    where the store looks them up: it imports `seal` and `page_digest` into its own module)."""
    from unsee.impl.store import anchor, ledger, sqlite

    with timing(watch, [(sqlite, "seal", "seal"), (sqlite, "page_digest", "page_digest"),
                        (ledger.Ledger, "append", "append"), (anchor, "check", "check")]):
        yield watch


PARTS = ("seal", "page_digest", "append", "check")


def _share(parts: dict[str, float], wall: float) -> dict:
    spent = sum(parts.get(p, 0.0) for p in PARTS)
    return {"wall_s": wall, **{f"{p}_s": parts.get(p, 0.0) for p in PARTS}, "trust_s": spent,
            "trust_share": spent / wall if wall > 0 else None}


def step_and_forget(model: str, T: int, tau: int, keyed: bool, folder: Path) -> dict:
    """One stored session of `model`: T steps (the target at τ), then a B7 forget of it."""
    from unsee.impl.store.agent import Agent
    from unsee.impl.store.keys import NO_KEY, new_key

    key = new_key(folder / "seal.key") if keyed else NO_KEY
    obs = store_session(T, tau)
    watch = Stopwatch()
    steps = []
    with store_timing(watch):
        agent = Agent.create(folder / "s.db", model=model, key=key, observations=obs[:1])
        watch.take()
        try:
            for o in obs[1:]:
                t0 = time.perf_counter()
                agent.step(o)
                wall = time.perf_counter() - t0
                steps.append(_share(watch.take()[0], wall))
            t0 = time.perf_counter()
            receipt = agent.forget(["z"])
            wall = time.perf_counter() - t0
            forget = _share(watch.take()[0], wall)
            forget["transitions"] = receipt["transitions"]
        finally:
            agent.close()
    n = len(steps)
    mean = {k: sum(s[k] for s in steps) / n for k in ("wall_s", *(f"{p}_s" for p in PARTS), "trust_s")}
    mean["trust_share"] = mean["trust_s"] / mean["wall_s"]
    return {"keyed": keyed, "steps": n, "step_mean": mean, "forget": forget}


def open_check(turns: int, repeats: int, folder: Path) -> dict:
    """A reference-model store of `turns` saves (and ledger records), opened and verified with the
    ledger check and without it; the fastest of `repeats` each."""
    from unsee.impl.store.agent import Agent
    from unsee.impl.store.keys import new_key
    from unsee.impl.store.sqlite import Store

    key = new_key(folder / "seal.key")
    obs = store_session(turns, turns // 2)
    path = folder / "long.db"
    t0 = time.perf_counter()
    with Agent.create(path, model="reference", key=key, observations=obs[:1]) as agent:
        for o in obs[1:]:
            agent.step(o)
    build = time.perf_counter() - t0
    out = {"turns": turns, "build_s": build}
    for name, anchored in (("with_ledger", True), ("without_ledger", False)):
        best = None
        for _ in range(repeats):
            t0 = time.perf_counter()
            st = Store(path, key=key, anchored=anchored)
            try:
                st.verify()
            finally:
                st.close()
            wall = time.perf_counter() - t0
            best = wall if best is None else min(best, wall)
        out[f"{name}_s"] = best
    out["records"] = len(Store(path, key=key).ledger.records())
    out["ledger_check_s"] = out["with_ledger_s"] - out["without_ledger_s"]
    return out


def trust_costs(model: str = "smollm2", T: int = 12, tau: int = 6, turns: int = 1000, repeats: int = 3,
                on_part=None) -> dict:
    with tempfile.TemporaryDirectory(prefix="unsee-bench-trust-") as tmp:
        doc = {"model": model, "T": T, "tau": tau, "runs": []}
        for keyed in (True, False):
            folder = Path(tmp) / ("keyed" if keyed else "checksum")
            folder.mkdir()
            doc["runs"].append(step_and_forget(model, T, tau, keyed, folder))
            if on_part:
                on_part()
        folder = Path(tmp) / "open"
        folder.mkdir()
        doc["open"] = open_check(turns, repeats, folder)
        if on_part:
            on_part()
    return doc
