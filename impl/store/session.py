"""A stored session, opened, forgotten from and checked: the store's operations on a runtime,
and `Agent`, the Python API for an agent process that stays up.
"""

from __future__ import annotations

import gc
import json
from contextlib import contextmanager
from dataclasses import replace

from unsee.impl.engine.runtime import make_runtime
from unsee.model.runtime import ReferenceRuntime
from unsee.model.session import UnseeError
from unsee.model.state import Config


def open_runtime(store, **kw) -> ReferenceRuntime:
    """A runtime holding the stored session; no cache is resident until a forget restores one,
    from the store's K/V pages where it keeps them."""
    from unsee.impl.store import StoreError, with_live_cache

    model = store.meta("model")
    pages = store.meta("kv_pages")
    kw = {"kv_pages": pages is not None, "dtype": store.meta("dtype", "float32"), **kw}
    rt = make_runtime(model, Config(), store.meta("policy"), **kw)
    if pages is not None:
        if json.loads(pages) != rt.model.page_layout():
            raise StoreError(f"the K/V pages in {store.path} have layout {pages}, but {model} loads as "
                             f"{rt.model.page_layout()}: open it with the dtype it was run with")
        rt.model.page_source = store.page_reader(rt.model.engine.device)
    rt.session = with_live_cache(store.load(rt.model))
    rt.config = rt.session.config
    return rt


def receipt_json(r) -> dict:
    return {"sources": list(r.sources), "method": r.method, "tau": r.tau, "T": r.T, "checkpoint": r.checkpoint,
            "transitions": r.transitions, "tokens_prefilled": r.tokens_prefilled, "tokens_decoded": r.tokens_decoded,
            "tokens_rematerialized": r.tokens_rematerialized, "tokens_restored": r.tokens_restored,
            "replies": r.replies, "replies_skipped": r.replies_skipped,
            "seconds": round(r.seconds, 4),
            "digests": r.digests, "compensation": list(r.compensation), "deduplicated": list(r.deduplicated)}


def check_store(store, on_step=None) -> dict:
    """Re-derive the stored session by a full reset from its (sanitized) log and compare every
    layer: the final digests, the last receipt's, and each stored R_t's non-cache layers."""
    from unsee.model.lm import REFERENCE
    from unsee.model.state import layer_digests

    stored = open_runtime(store)
    s = stored.session
    model = store.meta("model")
    fresh = make_runtime(model, s.config, s.policy, kv_pages=False, dtype=store.meta("dtype", "float32"))
    for obs in s.observations:
        fresh.step(obs)
        if on_step:
            on_step()
    want = json.loads(store.meta("digests"))
    got = dict(fresh.digest())
    mismatches = [{"layer": k, "t": s.T, "stored": want.get(k), "derived": got.get(k)}
                  for k in sorted(set(want) | set(got)) if want.get(k) != got.get(k)]
    receipts = store.receipts()
    if receipts:  # the last forget's receipt describes R_n, n its T (the session may have gone on)
        last = receipts[-1]
        n = last.get("T", s.T)
        at = got if n == s.T else layer_digests(replace(fresh.session.states[n], kv=()), REFERENCE) if n < s.T else {}
        for k in sorted(set(last.get("digests", {})) | set(at)):
            if (n == s.T or k != "kv") and last.get("digests", {}).get(k) != at.get(k):
                mismatches.append({"layer": f"receipt.{k}", "t": n})
        row = store.db.execute("SELECT chain FROM observations WHERE t = ?", (n,)).fetchone()
        if last.get("log_head") != (row[0] if row else "0" * 64):
            mismatches.append({"layer": "receipt.log_head", "t": n})
    for t, (a, b) in enumerate(zip(s.states, fresh.session.states)):
        da, db_ = layer_digests(a), layer_digests(b)
        for k in da:
            if k != "kv" and da[k] != db_[k]:
                mismatches.append({"layer": k, "t": t})
    return {"exact": not mismatches, "T": s.T, "mismatches": mismatches}


@contextmanager
def _no_cyclic_gc():
    """A forget (the load of a stored session, the replay, the save) makes some 10⁵ small acyclic
    objects; while they are made, the cyclic collector's full passes walk every object the
    process holds, and at T=800 one pass cost more than the rest of the forget. Reference
    counting frees them as always; the collector is back on when the forget returns or fails."""
    was = gc.isenabled()
    try:
        gc.disable()
        yield
    finally:
        if was:
            gc.enable()


def forget_stored(store, sources, method: str = "B7", rt=None, head: str | None = None
                  ) -> tuple[ReferenceRuntime, dict]:
    """Forget `sources` from a stored session under the store's lock and persist the result
    and its receipt in one transaction (only what follows the splice point is rewritten).
    `rt`: a runtime already holding the stored session whose log ends at chain head `head`
    (an agent that stays up); if the store moved on since, or none is given, one is opened."""
    import time

    for src in sources:  # checked before anything is written
        if store.is_forgotten(src):
            raise UnseeError(f"source {src!r} was already forgotten from {store.path}; nothing to do")
    known = sorted(store.sources())
    for src in sources:
        if src not in known:
            raise UnseeError(f"source {src!r} never entered this session; known sources: {known}")
    with store.exclusive(method), _no_cyclic_gc():
        t0 = time.perf_counter()
        if rt is None or store.meta("chain_head") != head:
            rt = open_runtime(store)  # under the lock: another forget may have finished
        opened = time.perf_counter() - t0
        texts = [p.text for o in rt.session.observations for p in o.parts if p.source in sources]
        receipt = rt.forget(list(sources), method=method)
        doc = receipt_json(receipt)
        load = getattr(getattr(rt, "bundle", None), "load_seconds", None)
        doc["load_seconds"] = round(opened if load is None else load, 4)  # the model, apart from the forget
        doc["open_seconds"] = round(opened, 4)  # model and stored session
        doc["target_digests"] = [store.target_digest(t) for t in texts]
        t1 = time.perf_counter()
        store.save(rt.session, store.meta("model"), dict(receipt.digests), doc, since=receipt.checkpoint)
        doc["save_seconds"] = round(time.perf_counter() - t1, 4)
    return rt, doc


class Agent:
    """An agent that stays up: its model loaded, its session persisted step by step.

        agent = Agent.create("s.db", model="tiny-llama")   # or Agent.open("s.db")
        agent.step(observation)                             # one transition, persisted
        receipt = agent.forget(["addr"])                    # B7 by default, persisted
        agent.check()["exact"]                              # a full reset agrees
    """

    def __init__(self, store, runtime) -> None:
        self.store = store
        self.runtime = runtime
        self.head = store.meta("chain_head")  # the log this runtime holds; another writer moves it

    @classmethod
    def create(cls, path, model: str = "tiny-llama", config: Config = Config(), policy: str = "every",
               kv_pages: bool = True, **kw) -> "Agent":
        from unsee.impl.store import Store, StoreError

        store = Store(path, create=True)
        if store.has_session():
            store.close()
            raise StoreError(f"{path} already holds a session; open it with Agent.open")
        rt = make_runtime(model, config, policy, kv_pages=kv_pages, **kw)
        store.save(rt.session, model, dict(rt.digest()))
        return cls(store, rt)

    @classmethod
    def open(cls, path) -> "Agent":
        from unsee.impl.store import Store

        store = Store(path)
        return cls(store, open_runtime(store))

    @property
    def session(self):
        return self.runtime.session

    def step(self, obs) -> None:
        """One transition R_t = F(R_{t-1}, o_t), persisted before it returns (only R_t is written)."""
        s = self.runtime.session
        if not s.lm.resident(s.state.kv):  # opened from the store: bring R_T's cache back first
            kv, _ = s.lm.rebuild(s.state.tokens, s.state.blocks)
            self.runtime.session = replace(s, states=s.states[:-1] + (replace(s.state, kv=kv),))
        self.runtime.step(obs)
        if self.store.meta("chain_head") != self.head:
            raise UnseeError(f"{self.store.path} was changed by another process; reopen it with Agent.open")
        self.store.save(self.runtime.session, self.store.meta("model"), dict(self.runtime.digest()),
                        since=self.runtime.session.T - 1)
        self.head = self.store.meta("chain_head")

    def forget(self, sources, method: str = "B7") -> dict:
        """Forget on the live runtime (its resident cache is cropped, not re-read) and persist."""
        self.runtime, doc = forget_stored(self.store, list(sources), method, self.runtime, self.head)
        self.head = self.store.meta("chain_head")
        return doc

    def check(self) -> dict:
        return check_store(self.store)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> "Agent":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
