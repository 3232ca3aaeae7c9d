"""Low-rank adapters (LoRA) for a pretrained causal LM, trained here and merged at load.

An organism made from a pretrained model ships only its adapter: for each adapted linear layer
W (out × in), two matrices A (r × in) and B (out × r), and the model that runs is
W + (alpha / r) · B A. `attach` wraps the layers for training (the base weights frozen, A drawn
from a seeded generator, B zero, so training starts at the base model); `merge` writes the
adapter into the weights once, after which the model is a plain transformers model: the same KV
engine, the same exactness checks, and a weights digest (`models.weights_digest`) of the merged
weights, which is what a store records.

The merge and the adapter's files are the engine's (`unsee.impl.engine.adapters`, exact to the
bit on any machine: the engine loads an adapted model without importing the organisms); they
are re-exported here.
"""

from __future__ import annotations

import torch

from unsee.impl.engine.adapters import ADAPTER_FILE, CONFIG_FILE, delta, load_adapter, merge, save_adapter

__all__ = ["ADAPTER_FILE", "CONFIG_FILE", "TARGETS", "LoRALinear", "adapter_state", "attach", "delta", "detach",
           "load_adapter", "merge", "save_adapter"]

# The linear layers of a Llama block: attention projections and the MLP.
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoRALinear(torch.nn.Module):
    """y = base(x) + scale · (x Aᵀ) Bᵀ; only A and B train."""

    def __init__(self, base: torch.nn.Linear, rank: int, alpha: float, generator: torch.Generator) -> None:
        super().__init__()
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)
        self.rank, self.scale = rank, alpha / rank
        # A ~ U(-1/sqrt(in), 1/sqrt(in)) (a Linear's own init), B = 0: the adapted model starts as the base.
        bound = 1.0 / base.in_features ** 0.5
        a = (torch.rand(rank, base.in_features, generator=generator, dtype=torch.float32) * 2 - 1) * bound
        self.A = torch.nn.Parameter(a.to(base.weight.dtype))
        self.B = torch.nn.Parameter(torch.zeros(base.out_features, rank, dtype=base.weight.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.A.t()) @ self.B.t() * self.scale


def _targets(model, targets) -> list[tuple[str, torch.nn.Module, str, torch.nn.Linear]]:
    """(qualified name, parent module, attribute, linear) of every layer to adapt, in name order."""
    out = []
    for name, mod in sorted(model.named_modules()):
        for attr in targets:
            child = getattr(mod, attr, None)
            if isinstance(child, torch.nn.Linear):
                out.append((f"{name}.{attr}" if name else attr, mod, attr, child))
    return out


def attach(model, rank: int = 8, alpha: float = 16.0, targets=TARGETS, seed: int = 0) -> list[str]:
    """Wrap every `targets` linear layer of `model` in a LoRALinear (A drawn in name order from
    one generator seeded with `seed`) and freeze every other parameter. Returns the adapted
    layers' names."""
    for p in model.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(seed)
    names = []
    for name, parent, attr, lin in _targets(model, targets):
        setattr(parent, attr, LoRALinear(lin, rank, alpha, gen))
        names.append(name)
    if not names:
        raise ValueError(f"no linear layer named {', '.join(targets)} in {type(model).__name__}")
    return names


def adapter_state(model) -> dict[str, torch.Tensor]:
    """{"<layer>.A": A, "<layer>.B": B} of every LoRALinear in `model` (copies, float32)."""
    out = {}
    for name, mod in model.named_modules():
        if isinstance(mod, LoRALinear):
            out[f"{name}.A"] = mod.A.detach().float().clone()
            out[f"{name}.B"] = mod.B.detach().float().clone()
    return out


def detach(model) -> None:
    """Put the base linear layers back in place of the LoRALinear wrappers (the adapter dropped)."""
    for name, mod in list(model.named_modules()):
        for attr, child in list(mod.named_children()):
            if isinstance(child, LoRALinear):
                setattr(mod, attr, child.base)
