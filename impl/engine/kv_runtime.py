"""The agent runtime on an engine: the reference scaffold (`unsee.specs.reference`) with F run by
the engine (`unsee.impl.engine.metered`).

`KVRuntime` implements the runtime protocol of `unsee.specs.protocol`, so every spec runs against
it unchanged. It holds a `ReferenceRuntime` (the protocol over a `Session`, or a mutant of it)
whose θ is an engine LM behind the model's protocol (`Metered`): a transformers model (`TorchLM`:
blocks rendered with the chat template, replies, plans and summaries decoded by the model, tool
arguments the tokens the model produced), or the reference model with the engine's interface
(`ReferenceEngine`). What it adds: the engine's work in each receipt, recorded replies handed to B7's
replay as drafts, B5′'s prefix cache, and the engine's event log of every forget checked against the
spec (`unsee.specs.traces`).
"""

from __future__ import annotations

import copy
from dataclasses import replace

from unsee.impl.engine.metered import EngineTransition, Meter, Metered
from unsee.model.state import Config
from unsee.specs.reference import ReferenceRuntime
from unsee.specs.traces import Fire, ForgetTrace, expectation


class KVRuntime:
    """The runtime protocol on an engine LM (see the module).

    `model`: `reference` (the pure-Python model on the engine's interface: fast, for tests; it has
    no K/V pages and no dtype, so those options do not apply to it), a transformers model
    (`tiny-llama`, `smollm2`, a local folder or `.gguf` file), or an engine LM already made.
    `core`: the runtime class whose forget runs (`ReferenceRuntime`, or a mutant the specs must reject)."""

    def __init__(self, model="tiny-llama", config: Config = Config(), policy: str = "every", dtype: str = "float32",
                 device: str | None = None, threads: int = 1, kv_pages: bool = True, attn: str = "eager",
                 core=ReferenceRuntime) -> None:
        engine = model if not isinstance(model, str) else engine_lm(model, dtype, device, threads, kv_pages, attn)
        self.lm = Metered(engine)
        self.name = "kv" if engine.name != "reference" else "reference"
        self.last_trace: ForgetTrace | None = None  # the event log of the last forget
        self.core = core(config, policy, self.lm, EngineTransition(self.lm))

    # -- the engine -------------------------------------------------------------------------
    @property
    def model(self):
        """The engine LM (`TorchLM` or `ReferenceEngine`)."""
        return self.lm.engine

    @property
    def engine(self):
        """The KVEngine of a transformers model."""
        return self.lm.engine.engine

    @property
    def bundle(self):
        return self.lm.engine.bundle

    # -- the runtime protocol ------------------------------------------------------------------
    @property
    def session(self):
        return self.core.session

    @session.setter
    def session(self, s) -> None:
        self.core.session = s

    @property
    def config(self) -> Config:
        return self.core.config

    @property
    def policy(self) -> str:
        return self.core.policy

    def reset(self) -> None:
        self.core.reset()

    def step(self, obs, drafts=None) -> None:
        """One transition. `drafts`: replies to try as drafts (`EngineTransition`); the result is
        the same with or without them, only the decoding it takes differs."""
        self.core.transition = EngineTransition(self.lm, drafts=drafts)
        self.core.step(obs)

    def forget(self, sources, method: str = "B7", checkpoint: int | None = None):
        """The core's forget with F run by the engine: B7 hands each replayed transition the
        recorded run's replies as drafts (the credit drafts may waste starts at what the restore
        saved); "B7-decode" is Algorithm 1 as written, every replayed reply decoded; B5′ gives the
        engine the cache of R_T as a prefix cache. The engine's events are
        recorded: `last_trace` holds the log and its expectation, and `last_trace.violations()`
        checks it against the sequences the specification allows. The receipt's work is the
        engine's count."""
        before = self.session
        lm = self.lm
        lm.meter, lm.credit, lm.reuse = Meter(), None, None
        self.core.transition = EngineTransition(lm, recorded=before.states if method == "B7" else None,
                                                credit_from_restore=method == "B7")
        asked, method = method, "B7" if method == "B7-decode" else method
        self.last_trace = None
        log = lm.engine.record_events()
        try:
            if method == "B5'":
                kv = before.state.kv
                if not lm.resident(kv):  # a new process: the prefix cache is the stored R_T, read back
                    kv = lm.rebuild(before.state.tokens, before.state.blocks)
                lm.reuse = lm.engine.prefix_cache(kv, before.state.tokens)
            receipt = self.core.forget(sources, method, checkpoint)
        finally:
            lm.engine.stop_recording()
            lm.reuse, lm.credit = None, None
        receipt = replace(receipt, method=asked, work=lm.meter.work(receipt.transitions))
        if log is not None:
            known = {e.call_id for e in before.world}
            log += [Fire(e.call_id, e.tool) for e in self.session.world if e.call_id not in known]
            self.last_trace = ForgetTrace(tuple(log), expectation(before, receipt, forced=checkpoint is not None))
        return receipt

    def digest(self) -> dict[str, str]:
        return self.core.digest()

    def trajectory(self):
        return self.core.trajectory()

    def graph(self):
        return self.core.graph()

    @property
    def invocations(self) -> int:
        return self.core.invocations

    @property
    def observations(self):
        return self.core.observations

    @property
    def checkpoints(self):
        return self.core.checkpoints

    @property
    def world(self):
        return self.core.world

    def branch(self) -> "KVRuntime":
        """A second runtime in exactly this state, with its own cache (for paired methods)."""
        other = copy.copy(self)
        other.lm = Metered(self.lm.engine.branch())
        other.core = copy.copy(self.core)
        other.core.model = other.lm
        other.core.transition = EngineTransition(other.lm)
        other.core.session = self.session  # re-bound to the branch's own cache
        return other


def engine_lm(model: str, dtype: str = "float32", device: str | None = None, threads: int = 1,
              kv_pages: bool = True, attn: str = "eager"):
    """The engine LM of a model name: `ReferenceEngine` for `reference`, else a `TorchLM`."""
    if model == "reference":
        from unsee.impl.engine.reference import REFERENCE_ENGINE

        return REFERENCE_ENGINE
    from unsee.impl.engine.lm import TorchLM  # torch loads only when a real model is asked for
    from unsee.impl.engine.models import load

    lm = TorchLM(load(model, dtype=dtype, device=device, attn=attn), threads=threads)
    lm.kv_pages = kv_pages
    return lm


def kv_factory_for(model: str, dtype: str = "float32", device: str | None = None):
    """For `unsee verify --engine kv`: one fresh runtime (own cache) per call, shared weights."""
    from unsee.impl.engine.models import load

    load(model, dtype=dtype, device=device)  # load once, before the first example

    def factory_for(cfg: dict):
        def factory():
            return KVRuntime(model, Config(sampling=cfg["sampling"], seed=cfg["seed"]), cfg["policy"],
                             dtype=dtype, device=device)
        return factory
    return factory_for


def kv_tiny_llama(cfg: dict) -> KVRuntime:
    """For the conformance kit: `--unsee-runtime=unsee.impl.engine.kv_runtime:kv_tiny_llama`."""
    return KVRuntime("tiny-llama", Config(sampling=cfg.get("sampling", False), seed=cfg.get("seed", 0)),
                     cfg.get("policy", "every"))


def make_runtime(model: str, config: Config = Config(), policy: str = "every", kv_pages: bool = True,
                 dtype: str = "float32", **kw) -> KVRuntime:
    """A runtime on `model` (see `KVRuntime`)."""
    return KVRuntime(model, config, policy, dtype=dtype, kv_pages=kv_pages, **kw)
