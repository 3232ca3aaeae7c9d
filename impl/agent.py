"""The agent runtime on a real model: the shared scaffold of `unsee.model` over a KVEngine.

`KVRuntime` implements the runtime protocol of `unsee.specs.protocol`, so every spec runs
against it unchanged. Its transition F is `unsee.model.state.step` with θ a transformers
model (`TorchLM`): blocks are rendered with the chat template, replies, plans and summaries
are decoded by the model, and tool arguments are the tokens the model produced.
"""

from __future__ import annotations

import copy
import json

from unsee.model.runtime import ReferenceRuntime
from unsee.model.state import Config, Meter


class KVRuntime(ReferenceRuntime):
    name = "kv"

    def __init__(self, model: str = "tiny-llama", config: Config = Config(), policy: str = "every",
                 dtype: str = "float32", device: str | None = None, threads: int = 1,
                 kv_pages: bool = True) -> None:
        from unsee.impl.engine import TorchLM  # torch loads only when a real model is asked for
        from unsee.impl.models import load

        self.bundle = load(model, dtype=dtype, device=device)
        lm = TorchLM(self.bundle, threads=threads)
        lm.kv_pages = kv_pages
        super().__init__(config, policy, lm)

    @property
    def engine(self):
        return self.model.engine

    def branch(self) -> "KVRuntime":
        """A second runtime in exactly this state, with its own cache (for paired methods)."""
        other = copy.copy(self)
        other.model = self.model.branch()
        other.session = self.session  # re-bound to the branch's own cache
        other._meter = Meter()
        return other


def kv_factory_for(model: str, dtype: str = "float32", device: str | None = None):
    """For `unsee verify --engine kv`: one fresh runtime (own cache) per call, shared weights."""
    from unsee.impl.models import load

    load(model, dtype=dtype, device=device)  # load once, before the first example

    def factory_for(cfg: dict):
        def factory():
            return KVRuntime(model, Config(sampling=cfg["sampling"], seed=cfg["seed"]), cfg["policy"],
                             dtype=dtype, device=device)
        return factory
    return factory_for


def make_runtime(model: str, config: Config = Config(), policy: str = "every", **kw) -> ReferenceRuntime:
    """`reference` gives the pure-Python model (fast, for tests); anything else a KVRuntime."""
    if model == "reference":
        return ReferenceRuntime(config, policy)
    return KVRuntime(model, config, policy, **kw)


def open_runtime(store, **kw) -> ReferenceRuntime:
    """A runtime holding the stored session; no cache is resident until a forget restores one,
    from the store's K/V pages where it keeps them."""
    from unsee.impl.store import with_live_cache

    from unsee.impl.store import StoreError

    model = store.meta("model")
    pages = store.meta("kv_pages")
    if model != "reference":
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
            "seconds": round(r.seconds, 4),
            "digests": r.digests, "compensation": list(r.compensation), "deduplicated": list(r.deduplicated)}
