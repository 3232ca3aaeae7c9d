"""A stored session, opened, forgotten from and checked: the store's operations on a runtime,
and `Agent`, the Python API for an agent process that stays up.
"""

from __future__ import annotations

import gc
import json
from contextlib import contextmanager
from dataclasses import replace

from unsee.impl.engine.kv_runtime import KVRuntime, make_runtime
from unsee.model.receipt import receipt_json
from unsee.impl.store.digests import identity_of, stored_settings
from unsee.impl.store.errors import StoreError
from unsee.model.errors import UnseeError
from unsee.model.state import Config


def open_runtime(store, **kw) -> KVRuntime:
    """A runtime holding the stored session, verified row by row, on the model and execution
    settings the store was run with (weights, dtype, attention kernel, threads, device): anything
    else would not reproduce its states, so it is refused. No cache is resident until a forget
    restores one, from the store's K/V pages where it keeps them."""
    from unsee.impl.store.sqlite import with_live_cache

    model = store.model
    pages = store.page_layout
    stored = store.identity
    settings = stored_settings(store)
    kw = {"kv_pages": pages is not None, **settings, **kw}
    session = store.load(None)  # verified before a model is loaded for it
    root = store.loaded_root
    try:
        rt = make_runtime(model, Config(), store.policy, **kw)
    except RuntimeError as e:  # e.g. a CUDA store opened where there is no CUDA device
        raise StoreError(f"{store.path} was run with {settings}, which this machine cannot load ({e})") from e
    ours = identity_of(rt.model, model)
    differ = sorted(k for k in stored if k in ours and stored[k] != ours[k])
    if differ:
        raise StoreError(f"{store.path} was run with " + ", ".join(f"{k}={stored[k]!r}" for k in differ)
                         + "; this process would run " + ", ".join(f"{k}={ours[k]!r}" for k in differ)
                         + ": forgetting under other settings would not reproduce its states")
    if pages is not None:
        if pages != rt.model.page_layout():
            raise StoreError(f"the K/V pages in {store.path} have layout {pages}, but {model} loads as "
                             f"{rt.model.page_layout()}: open it with the dtype it was run with")
        rt.model.page_source = store.page_reader(rt.model.engine.device)
    rt.model.prepare_grammar()  # a model's setup, counted in opening it
    rt.session = with_live_cache(session)
    rt.core.config = rt.session.config
    rt.root = root
    return rt


def check_store(store, on_step=None, fast: bool = False) -> dict:
    """Re-derive the stored session by a full reset from its (sanitized) log, under the stored
    (verified) configuration and execution settings, and compare every layer: the final digests,
    the last receipt's and each stored R_t's non-cache layers (the side-effect ledger, which
    holds what fired, is covered by the digests). `fast`:
    verify every digest, every K/V page's included, without the reset."""
    from unsee.model.lm import REFERENCE
    from unsee.model.state import layer_digests

    if fast:
        with store.snapshot():
            root = store.verify(pages=True)
            pages = store.page_count()
        return {"exact": None, "verified": True, "T": store.length(), "pages": pages, "root": root, "mismatches": [],
                "pages_damaged": [{"key": k, "born": born} for k, born in store.damaged_pages]}
    stored = open_runtime(store)
    s = stored.session
    model = store.model
    fresh = make_runtime(model, s.config, s.policy, kv_pages=False, **stored_settings(store))
    for obs in s.observations:
        fresh.step(obs)
        if on_step:
            on_step()
    want = store.digests
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
        if last.get("log_head") != store.chain_at(n):
            mismatches.append({"layer": "receipt.log_head", "t": n})
    for t, (a, b) in enumerate(zip(s.states, fresh.session.states)):
        da, db_ = layer_digests(a), layer_digests(b)
        for k in da:
            if k != "kv" and da[k] != db_[k]:
                mismatches.append({"layer": k, "t": t})
    return {"exact": not mismatches, "verified": True, "T": s.T, "mismatches": mismatches}


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


class TraceViolation(UnseeError):
    """The engine's event log of a forget breaks a rule of the spec (`unsee.specs.traces`)."""


def trace_report(rt) -> dict | None:
    """The engine's event log of `rt`'s last forget, checked against the spec: {events,
    violations}; None for a runtime that records none (the reference)."""
    trace = rt.last_trace
    if trace is None:
        return None
    return {"events": len(trace.events), "violations": [str(v) for v in trace.violations()]}


def forget_stored(store, sources, method: str = "B7", rt=None, head: str | None = None,
                  model: str | None = None, kind: str = "forget") -> tuple[KVRuntime, dict]:
    """Forget `sources` from a stored session under the store's lock and persist the result
    and its receipt in one transaction (only what follows the splice point is rewritten).
    `rt`: a runtime already holding the stored session whose store had root `head` (an agent
    that stays up); if the store moved on since, or none is given, one is opened (verified).
    `model`: refuse unless the store was run on it. The engine's event log (a real model) is
    checked against the spec before anything is persisted: a forget that breaks a rule raises
    TraceViolation and leaves the store as it was; the receipt's `trace` says what was checked."""
    import time

    stored_model = store.model
    if model is not None and model != stored_model:
        raise UnseeError(f"{store.path} was run on {stored_model!r}, not {model!r}: forgetting on another model "
                         "would not reproduce its states")
    store.verify()  # a damaged store is refused before anything else is read from it
    store.require_forgettable(sources)  # checked before anything is written
    with store.exclusive(method), _no_cyclic_gc():
        t0 = time.perf_counter()
        if stored_model != "reference" and rt is None:  # the ML libraries: a cost of every new process,
            import unsee.impl.engine.lm  # noqa: F401  reported apart from opening the store (torch, transformers)
            import transformers.modeling_utils  # noqa: F401
        imported = time.perf_counter() - t0
        t0 = time.perf_counter()
        if rt is None or store.root() != head:
            rt = open_runtime(store)  # under the lock, verified: another writer may have finished
            head = rt.root
        root = head
        opened = time.perf_counter() - t0
        parts = [(p.source, p.text) for o in rt.session.observations for p in o.parts if p.source in sources]
        texts = [text for _, text in parts]
        receipt = rt.forget(list(sources), method=method)
        doc = receipt_json(receipt)
        load = rt.model.load_seconds
        doc["load_seconds"] = round(opened if load is None else load, 4)  # the model, apart from the forget
        doc["open_seconds"] = round(opened, 4)  # model and stored session
        doc["import_seconds"] = round(imported, 4)  # torch and transformers, before the open
        doc["target_digests"] = [store.target_digest(t) for t in texts]
        # pages that failed their digest were recomputed from the verified tokens (counted in
        # tokens_rematerialized): the receipt names them
        doc["pages_recomputed"] = [{"key": k, "born": born} for k, born in store.damaged_pages]
        trace = trace_report(rt)
        if trace is not None:
            doc["trace"] = trace
            if trace["violations"]:  # under the lock, before the save: the store keeps the session as it was
                raise TraceViolation(f"the forget's engine trace ({trace['events']} events) breaks the spec: "
                                     + "; ".join(trace["violations"][:5]) + f"; nothing was written to {store.path}")
        t1 = time.perf_counter()
        # persisted, the targets are named by salted digest only; the caller keeps their names
        tombstones = [store.tombstone(src, text) for src, text in parts]
        kept = {**doc, "sources": [store.target_digest(src) for src in sources], "tombstones": tombstones,
                "generation": store.generation + 1}
        rt.root = store.save(rt.session, store.model, rt.model, dict(receipt.digests), kept, since=receipt.checkpoint,
                             expect=root, tombstones=tombstones, kind=kind)
        doc["save_seconds"] = round(time.perf_counter() - t1, 4)
        # verifying every row read and page restored, and sealing the new digests (part of the
        # open, forget and save times above)
        doc["integrity_seconds"] = round(store.integrity_seconds, 4)
    return rt, doc


def reapply(path, key=None, ledger=None, method: str = "B7") -> dict:
    """Bring a store that its ledger refuses as an older state (a restored backup, a rolled-back file)
    back to a state the ledger accepts: forget again every stored part that matches one of the
    ledger's tombstones, and record the result. Returns {"forgotten": n parts, "sources": the source
    ids forgotten again, "steps_lost": steps the ledger recorded after the store's state (they are
    not in it and cannot be re-made), "receipt": the forget's receipt, or None}. Python API of
    `unsee forget --db PATH --reapply`."""
    from unsee.impl.store import anchor
    from unsee.impl.store.errors import LedgerError
    from unsee.impl.store.sqlite import Store

    store = Store(path, key=key, ledger=ledger, anchored=False)
    try:
        store.verify()  # its own rows, before anything is read from them
        records = store.ledger.records()
        if records[0].store != store.meta_id:
            raise LedgerError(f"{store.ledger.path} is the ledger of another store; give this store's with --ledger")
        root = store.root()
        at = next((r for r in records if r.root == root), None)
        steps_lost = 0 if at is None else sum(r.kind == "step" for r in records[at.seq + 1:])
        held = anchor.held_tombstones(store, records)
        sources = sorted({src for src, _ in held})
        doc = None
        if sources:
            store.anchored = False
            _, doc = forget_stored(store, sources, method, kind="reapply")
        elif root != records[-1].root:  # nothing forgotten is in it: the ledger records it as it is
            with store.writer():
                store.ledger.append(store.meta_id, store.generation, "reapply", root, records[-1].root)
        store.anchored = True
        store.verify()  # now the state its ledger last recorded
        return {"forgotten": len(held), "sources": sources, "steps_lost": steps_lost, "receipt": doc}
    finally:
        store.close()


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
        # the root of the store this runtime's session was read from or saved as (never re-read:
        # another writer may have saved since, and a step must then reopen, not overwrite it)
        self.root = runtime.root
        self.settings_note: str | None = None  # how `create` chose the settings, if it did

    @classmethod
    def create(cls, path, model: str = "tiny-llama", config: Config = Config(), policy: str = "every",
               kv_pages: bool = True, observations=(), on_step=None, key=None, ledger=None, **kw) -> "Agent":
        """A new store at `path` (claimed atomically: an existing path is refused before the model
        loads) holding a new session; `observations`: steps to run first, persisted together in
        one save (`unsee run`), on_step() after each. The store is built beside `path` and put there
        only once that save is complete: if anything fails, or the process dies, nothing is left at
        `path` (a run that died leaves a partial file the next one removes). `key`, `ledger`: the
        store's seal and its ledger's path (`unsee.impl.store.sqlite.Store`).
        attn, dtype or threads "auto": chosen by measurement (`unsee.impl.engine.settings.choose`)
        once the path is claimed; the agent's `settings_note` says which and why. Left out, they
        are eager, float32 and one thread."""
        import warnings

        from unsee.impl.store.sqlite import Store

        for line in config.calls_that_may_be_cut():  # Config(call_tokens=...) makes room
            warnings.warn(line, stacklevel=2)
        store = Store(path, create=True, key=key, ledger=ledger)  # refuses an existing path before anything loads
        note = None
        try:
            if model != "reference" and "auto" in (kw.get("attn"), kw.get("dtype"), kw.get("threads")):
                from unsee.impl.engine import settings

                chosen, note = settings.choose(model, kw.get("device"), kw.get("attn", "eager"),
                                               kw.get("dtype", "float32"), kw.get("threads", 1))
                kw.update(chosen)
                note = None if note == "as given" else note
            rt = make_runtime(model, config, policy, kv_pages=kv_pages, **kw)
            for obs in observations:
                rt.step(obs)
                if on_step:
                    on_step()
            rt.root = store.save(rt.session, model, rt.model, dict(rt.digest()))
            store.publish()
        except BaseException:
            store.discard()  # the path was claimed by this call: give it back
            raise
        agent = cls(store, rt)
        agent.settings_note = note
        return agent

    @classmethod
    def open(cls, path, key=None, ledger=None) -> "Agent":
        """The stored session at `path`, verified and checked against its ledger (`key`, `ledger`: see
        `unsee.impl.store.sqlite.Store`)."""
        from unsee.impl.store.sqlite import Store

        store = Store(path, key=key, ledger=ledger)
        return cls(store, open_runtime(store))

    @property
    def session(self):
        return self.runtime.session

    def step(self, obs) -> dict:
        """One transition R_t = F(R_{t-1}, o_t), persisted before it returns (only R_t is written).
        Returns what it produced, decoded (`unsee.impl.store.show.turn_view`): the replies, memory
        records, summary, planned and committed tool calls, and the artifacts with their sources.

        Steps and forgets on one store take turns: a step waits while another process forgets,
        then reads the store it left (verified) and steps from there, so no step is lost and
        none builds on a state that was forgotten from."""
        with self.store.writer():
            if self.store.root() != self.root:
                self.runtime = open_runtime(self.store)
                self.root = self.runtime.root
            s = self.runtime.session
            if not s.lm.resident(s.state.kv):  # opened from the store: bring R_T's cache back first
                kv = s.lm.rebuild(s.state.tokens, s.state.blocks)
                self.runtime.session = replace(s, states=s.states[:-1] + (replace(s.state, kv=kv),))
            before = self.runtime.session
            try:
                self.runtime.step(obs)
                self.root = self.store.save(self.runtime.session, self.store.model, self.runtime.model,
                                            dict(self.runtime.digest()), since=self.runtime.session.T - 1,
                                            expect=self.root)
            except BaseException:
                self.runtime.session = before  # not persisted: the agent stays where the store is
                raise
        from unsee.impl.store.show import decoder_of, turn_view

        s = self.runtime.session
        return turn_view(s.T, obs, s.states[-2], s.state, decoder_of(self.runtime.model.template))

    def forget(self, sources, method: str = "B7") -> dict:
        """Forget on the live runtime (its resident cache is cropped, not re-read) and persist,
        with its engine trace checked against the spec first (`forget_stored`)."""
        try:
            self.runtime, doc = forget_stored(self.store, list(sources), method, self.runtime, self.root)
        except BaseException:  # a trace violation, a failed save, an interrupt: the runtime may hold
            self.root = None  # what was not persisted, so the next step reopens the store
            raise
        self.root = self.runtime.root  # what the forget saved (another writer may have saved since)
        return doc

    def check(self) -> dict:
        return check_store(self.store)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> "Agent":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
