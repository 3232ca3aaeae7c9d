"""A stored runtime for the conformance kit and `unsee verify --engine stored`: the runtime protocol
over an `Agent` whose every step and forget is persisted in a session store, with the persistence
hooks of `unsee.specs.protocol` that let the kit judge what the store holds, not only the state in
memory.

    pytest --pyargs unsee.specs.conformance --unsee-runtime=unsee.impl.store.kit:stored_reference
    unsee verify --engine stored --model reference

The protocol members delegate to the `KVRuntime` the agent holds (`unsee.impl.engine.kv_runtime`);
`step` is `Agent.step` (one save per transition) and `forget` is `Agent.forget` (`forget_stored`:
verify, replay, one save from the splice point). The hooks:

- `persisted_files()`: the bytes of the store, its ledger and any side file beside it;
- `persisted_log()`: the observation log read back from the store by a new `Store` (verified);
- `persisted_secrets(sources)`: what encodes the sources in the store's own formats, asked before
  the forget: the token ids of every block in I(z) as the store's deltas write them, and the K/V
  pages born at or after τ (a real model's);
- `persisted_database()` and `verify_persisted(path)`: the store's file, and a check of a copy of
  it that raises when the store would not use it as it is (refused, or a page recomputed and
  announced).

Each runtime keeps its store in a temporary folder of its own, removed with the runtime.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import weakref
from pathlib import Path

from unsee.impl.store.agent import Agent
from unsee.impl.store.keys import NO_KEY
from unsee.impl.store.sqlite import Store
from unsee.model.errors import UnseeError
from unsee.model.plan import plan_forget
from unsee.model.state import Config
from unsee.specs.erasure import schema

SIDE_SUFFIXES = ("-journal", "-wal", "-shm", ".ledger", ".unsee-intent", ".partial")


def _scratch() -> str | None:
    """Where the stores go: memory-backed /dev/shm where there is one (a step's save syncs the ledger
    to disk, and the kit makes thousands of stores), else the temporary folder."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def _close(box: list, folder: str) -> None:
    for agent in box:
        try:
            agent.close()
        except Exception:  # noqa: BLE001 -- a store already closed, at interpreter exit
            pass
    box.clear()
    shutil.rmtree(folder, ignore_errors=True)


class StoredRuntime:
    """The runtime protocol over a session store (see the module). `model`: `reference` or a model
    name `unsee.impl.engine.kv_runtime.make_runtime` loads; `kv_pages`: keep K/V pages (a real
    model's only); `folder`: where its temporary folder goes (default: /dev/shm where there is one); the folder
    is removed with the runtime."""

    def __init__(self, model: str = "reference", config: Config = Config(), policy: str = "every",
                 kv_pages: bool = True, folder: str | Path | None = None) -> None:
        self.model, self.config, self.policy, self.kv_pages = model, config, policy, kv_pages
        self.folder = Path(tempfile.mkdtemp(prefix="unsee-kit-", dir=folder if folder is not None else _scratch()))
        self._box: list[Agent] = []
        self._count = itertools.count()
        self._finalizer = weakref.finalize(self, _close, self._box, str(self.folder))
        self.agent: Agent | None = None
        self._base = 0  # invocations of runtimes this one held before the agent's current one
        self.reset()

    # -- the store ----------------------------------------------------------------------------
    @property
    def path(self) -> Path:
        return self.agent.store.final

    def _open(self) -> None:
        path = self.folder / f"session-{next(self._count)}.db"
        agent = Agent.create(path, model=self.model, config=self.config, policy=self.policy,
                             kv_pages=self.kv_pages and self.model != "reference", key=NO_KEY,
                             ledger=str(path) + ".ledger")
        self.agent = agent
        self._box.append(agent)

    def close(self) -> None:
        self._finalizer()

    @property
    def runtime(self):
        return self.agent.runtime

    # -- the runtime protocol --------------------------------------------------------------------
    def reset(self) -> None:
        if self.agent is not None:
            old = self.agent
            self._box.remove(old)
            files = [old.store.final] + [Path(str(old.store.final) + s) for s in SIDE_SUFFIXES]
            old.close()
            for f in files:
                f.unlink(missing_ok=True)
        self._base = 0
        self._open()

    def step(self, obs) -> None:
        self.agent.step(obs)

    def forget(self, sources, method: str = "B7", checkpoint: int | None = None):
        """`Agent.forget` (verify, replay, one save from the splice point), with `checkpoint` passed
        to the runtime's forget; returns the runtime's receipt (the store keeps its JSON form)."""
        rt = self.agent.runtime
        got = []
        inner = rt.forget

        def forget_once(srcs, method: str = method):
            got.append(inner(srcs, method=method, checkpoint=checkpoint))
            return got[-1]

        rt.forget = forget_once  # the instance's: forget_stored calls rt.forget(sources, method=...)
        try:
            self.agent.forget(list(sources), method)
        finally:
            del rt.forget
        if not got or self.agent.runtime is not rt:
            raise UnseeError("the stored forget reopened the store: another writer changed it")
        return got[-1]

    def digest(self) -> dict[str, str]:
        return self.runtime.digest()

    def trajectory(self):
        return self.runtime.trajectory()

    def graph(self):
        return self.runtime.graph()

    @property
    def invocations(self) -> int:
        return self._base + self.runtime.invocations

    @property
    def observations(self):
        return self.runtime.observations

    @property
    def checkpoints(self):
        return self.runtime.checkpoints

    @property
    def world(self):
        return self.runtime.world

    # -- what it persists ----------------------------------------------------------------------
    def persisted_files(self) -> dict[str, bytes]:
        """Every file of this store: the database, its ledger and whatever lies beside it."""
        base = self.path
        return {p.name: p.read_bytes() for p in sorted(base.parent.glob(base.name + "*")) if p.is_file()}

    def persisted_log(self):
        """The log as a new process reads it: a new `Store` on the file, every row verified. (Not
        against the ledger: its tombstones refuse a store a forgotten part entered again, which the
        kit's sessions do; see the module.)"""
        store = Store(self.path, key=NO_KEY, ledger=str(self.path) + ".ledger", anchored=False)
        try:
            return store.load(None).observations
        finally:
            store.close()

    def persisted_secrets(self, sources) -> list[bytes]:
        """What encodes `sources` in the store's own formats, before they are forgotten: the tokens of
        every block in I(z) as a delta writes them ("id,id,..."), and the bytes of every K/V page born
        at or after τ. The kit counts only those present before the forget and absent from the twin's
        store, so a conservative list is safe."""
        s = self.runtime.session
        plan = plan_forget(s, list(sources))
        out = []
        for t in range(plan.tau, s.T + 1):
            r = s.states[t]
            for b in r.blocks:
                if b.artifact in plan.taint and int(b.artifact[1:].split(".", 1)[0]) == t:
                    out.append(",".join(map(str, r.tokens[b.start:b.end])).encode())
        with self.agent.store.snapshot():
            out += [bytes(d) for (d,) in self.agent.store.db.execute("SELECT data FROM pages WHERE born >= ?",
                                                                     (plan.tau,))]
        return out

    def persisted_database(self) -> str:
        return str(self.path)

    def verify_persisted(self, path) -> None:
        """Raise unless the store at `path` (a copy of this one's file) verifies whole: every row
        against its digest, and every K/V page (a page that fails is recomputed and announced on
        use: refused here)."""
        store = Store(path, key=NO_KEY, ledger=str(path) + ".ledger", anchored=False)
        try:
            store.verify(pages=True)
            if store.damaged_pages:
                raise UnseeError(f"{len(store.damaged_pages)} K/V page(s) fail their digest: a forget "
                                 "recomputes them and says so")
        finally:
            store.close()


def _config(cfg: dict) -> Config:
    return Config(sampling=cfg.get("sampling", False), seed=cfg.get("seed", 0))


def stored_reference(cfg: dict) -> StoredRuntime:
    """For the kit: `--unsee-runtime=unsee.impl.store.kit:stored_reference` (the reference model)."""
    return StoredRuntime("reference", _config(cfg), cfg.get("policy", "every"))


def stored_tiny_llama(cfg: dict) -> StoredRuntime:
    """For the kit: `--unsee-runtime=unsee.impl.store.kit:stored_tiny_llama` (K/V pages kept)."""
    return StoredRuntime("tiny-llama", _config(cfg), cfg.get("policy", "every"))


def stored_factory_for(model: str = "reference"):
    """For `unsee verify --engine stored`: config → a factory of stored runtimes on `model`."""
    if model != "reference":
        from unsee.impl.engine.models import load

        load(model)  # once, before the first example

    def factory_for(cfg: dict):
        return lambda: StoredRuntime(model, _config(cfg), cfg["policy"])
    return factory_for


# -- the schema and the seal -------------------------------------------------------------------------

def unsealed_columns(path, coverage=None) -> list[tuple[str, str]]:
    """(table, column) of every column of the database at `path` that `coverage` (default
    `unsee.impl.store.digests.COVERAGE`) does not put under a digest, and of every column it names
    that the database lacks."""
    if coverage is None:
        from unsee.impl.store.digests import COVERAGE as coverage
    have = schema(path)
    covered = {t: set(cols) for t, (_, cols, _) in coverage.items()}
    out = [(t, c) for t, cols in have.items() for c in cols if c not in covered.get(t, ())]
    out += [(t, c) for t, cols in covered.items() for c in sorted(cols) if c not in have.get(t, ())]
    return sorted(out)
