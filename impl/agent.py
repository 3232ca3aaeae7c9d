"""The agent runtime on a real model: the shared scaffold of `unsee.model` over a KVEngine.

`KVRuntime` implements the runtime protocol of `unsee.specs.protocol`, so every spec runs
against it unchanged. Its transition F is `unsee.model.state.step` with θ a transformers
model (`TorchLM`): blocks are rendered with the chat template, replies, plans and summaries
are decoded by the model, and tool arguments are the tokens the model produced.
"""

from __future__ import annotations

from unsee.impl.engine import TorchLM
from unsee.impl.models import load
from unsee.model.runtime import ReferenceRuntime
from unsee.model.state import Config


class KVRuntime(ReferenceRuntime):
    name = "kv"

    def __init__(self, model: str = "tiny-llama", config: Config = Config(), policy: str = "every",
                 dtype: str = "float32", device: str | None = None, threads: int = 1) -> None:
        self.bundle = load(model, dtype=dtype, device=device)
        super().__init__(config, policy, TorchLM(self.bundle, threads=threads))

    @property
    def engine(self):
        return self.model.engine


def kv_factory_for(model: str, dtype: str = "float32", device: str | None = None):
    """For `unsee verify --engine kv`: one fresh runtime (own cache) per call, shared weights."""
    load(model, dtype=dtype, device=device)  # load once, before the first example

    def factory_for(cfg: dict):
        def factory():
            return KVRuntime(model, Config(sampling=cfg["sampling"], seed=cfg["seed"]), cfg["policy"],
                             dtype=dtype, device=device)
        return factory
    return factory_for
