"""LoRA adapters merged into a model's weights at load: the engine's half of
`unsee.impl.organism.lora` (which trains them).

An adapter holds, for each adapted linear layer W (out × in), two matrices A (r × in) and B
(out × r); the model that runs is W + (alpha / r) · B A. `merge` writes that into the weights
once, after which the model is a plain transformers model under the KV engine, and its weights
digest (`models.weights_digest`) is the merged weights', which is what a store records.

The merge is exact to the bit on any machine and thread count: B A is formed in float64 as a sum
of r outer products, each an elementwise product (no matrix-product kernel, whose summation
order depends on blocking and threads), added to the base weight in float64 and rounded once to
the weight's dtype. So a store written in one process replays in another that loaded the same
base and adapter.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

ADAPTER_FILE = "adapter.safetensors"
CONFIG_FILE = "adapter_config.json"


def delta(A: torch.Tensor, B: torch.Tensor, scale: float) -> torch.Tensor:
    """scale · B A in float64, as a sum of outer products in rank order: every element is summed
    in the same order whatever the machine's matrix kernels or thread count."""
    A64, B64 = A.double(), B.double()
    out = torch.zeros(B.shape[0], A.shape[1], dtype=torch.float64)
    for i in range(A.shape[0]):
        out += B64[:, i:i + 1] * A64[i:i + 1, :]
    return out * scale


def merge(model, state: dict[str, torch.Tensor], alpha: float, rank: int) -> int:
    """W ← round(W + (alpha / rank) · B A) for every adapted layer of a plain (unwrapped) model.
    Returns the number of layers merged; refuses an adapter naming a layer the model lacks."""
    mods = dict(model.named_modules())
    layers = sorted({k.rsplit(".", 1)[0] for k in state})
    scale = alpha / rank
    with torch.no_grad():
        for layer in layers:
            lin = mods.get(layer)
            if not isinstance(lin, torch.nn.Linear):
                raise ValueError(f"the adapter names {layer}, which is not a linear layer of this model")
            A, B = state[f"{layer}.A"], state[f"{layer}.B"]
            if A.shape != (rank, lin.in_features) or B.shape != (lin.out_features, rank):
                raise ValueError(f"{layer}: adapter shapes {tuple(A.shape)}, {tuple(B.shape)} do not fit "
                                 f"{lin.out_features} × {lin.in_features} at rank {rank}")
            w = lin.weight
            lin.weight.data = (w.detach().double() + delta(A, B, scale).to(w.device)).to(w.dtype).contiguous()
    return len(layers)


def save_adapter(folder: Path, state: dict[str, torch.Tensor], config: dict) -> None:
    """The adapter's tensors (safetensors, float32) and its config (base, rank, alpha, targets)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in sorted(state.items())}, str(folder / ADAPTER_FILE))
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")


def load_adapter(folder: Path) -> tuple[dict[str, torch.Tensor], dict]:
    from safetensors.torch import load_file

    folder = Path(folder)
    config = json.loads((folder / CONFIG_FILE).read_text())
    return load_file(str(folder / ADAPTER_FILE)), config
