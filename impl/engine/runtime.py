"""The agent runtime on a real model: the shared scaffold of `unsee.model` over a KVEngine.

`KVRuntime` implements the runtime protocol of `unsee.specs.protocol`, so every spec runs
against it unchanged. Its transition F is `unsee.model.state.step` with `lm` a transformers
model (`TorchLM`): blocks are rendered with the chat template, replies, plans and summaries
are decoded by the model, and tool arguments are the tokens the model produced.
"""

from __future__ import annotations

import copy
import json

from dataclasses import replace

from unsee.model.runtime import ReferenceRuntime
from unsee.model.session import UnseeError
from unsee.model.state import Config, Meter
from unsee.specs.traces import Fire, ForgetTrace, expectation


class KVRuntime(ReferenceRuntime):
    name = "kv"

    def __init__(self, model: str = "tiny-llama", config: Config = Config(), policy: str = "every",
                 dtype: str = "float32", device: str | None = None, threads: int = 1,
                 kv_pages: bool = True, attn: str = "eager") -> None:
        from unsee.impl.engine.lm import TorchLM  # torch loads only when a real model is asked for
        from unsee.impl.engine.models import load

        self.bundle = load(model, dtype=dtype, device=device, attn=attn)
        lm = TorchLM(self.bundle, threads=threads)
        lm.kv_pages = kv_pages
        self.last_trace: ForgetTrace | None = None  # the event log of the last forget
        super().__init__(config, policy, lm)

    @property
    def engine(self):
        return self.model.engine

    def forget(self, sources, method: str = "B7", checkpoint: int | None = None):
        """The reference runtime's forget, with the engine's events recorded: `last_trace`
        holds the log and its expectation; `last_trace.violations()` checks it against the
        sequences the specification allows (`unsee.specs.traces`)."""
        before = self.session
        self.last_trace = None
        log = self.model.record_events()
        try:
            receipt = super().forget(sources, method, checkpoint)
        finally:
            self.model.stop_recording()
        known = {e.call_id for e in before.world}
        log += [Fire(e.call_id, e.tool) for e in self.session.world if e.call_id not in known]
        self.last_trace = ForgetTrace(tuple(log), expectation(before, receipt, forced=checkpoint is not None))
        return receipt

    def branch(self) -> "KVRuntime":
        """A second runtime in exactly this state, with its own cache (for paired methods)."""
        other = copy.copy(self)
        other.model = self.model.branch()
        other.session = self.session  # re-bound to the branch's own cache
        other._meter = Meter()
        return other


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
    """For the conformance kit: `--unsee-runtime=unsee.impl.engine.runtime:kv_tiny_llama`."""
    return KVRuntime("tiny-llama", Config(sampling=cfg.get("sampling", False), seed=cfg.get("seed", 0)),
                     cfg.get("policy", "every"))


def make_runtime(model: str, config: Config = Config(), policy: str = "every", kv_pages: bool = True,
                 dtype: str = "float32", **kw) -> ReferenceRuntime:
    """`reference` gives the pure-Python model (fast, for tests; it has no K/V pages and no dtype,
    so those options do not apply to it); anything else a KVRuntime."""
    if model == "reference":
        return ReferenceRuntime(config, policy)
    return KVRuntime(model, config, policy, dtype=dtype, kv_pages=kv_pages, **kw)
