"""K/V pages: every block's K/V rows, persisted once, so that a checkpoint's cache is the
concatenation of its manifest's pages (DESIGN: "Restoring a checkpoint whose cache is not
resident").

A page is named by its content, like a radix-cache block hash: key_i = H(key_{i-1} ‖ kind ‖
prefill ‖ the forward's shape ‖ tokens of block i), the shape being where the block starts in
the forward that computed it and that forward's length (`unsee.model.state.forward_groups`: a
model turn's forward holds the prompt blocks joined to it). Two blocks with the same key have
the same tokens, the same preceding context and rows from a forward of the same shape at the
same offset; the tokens after a row do not change its bits (`row_independence`), so on one
model, dtype and thread count they have the same bits. A stale page can therefore never be read
for a block whose context changed: its key would differ.

Layout of one page: [layers, 2 (K, V), kv_heads, n, head_dim], the model's dtype, stored raw.
"""

from __future__ import annotations

import hashlib
from array import array

from unsee.model.state import forward_groups

ROOT = "joined-fixed-point-turns"  # names the canonical schedule: pages of another schedule never match


def page_key(prev: str, kind: str, prefill: int, tokens, shape: tuple[int, int] = (0, 0)) -> str:
    h = hashlib.sha256(prev.encode())
    h.update(f"|{kind}|{prefill}|{shape[0]}|{shape[1]}|".encode())
    h.update(array("q", tokens).tobytes())
    return h.hexdigest()[:32]


class PageKeys:
    """key(block) for the blocks of a state, computed once per Block object.

    Consecutive states share their Block objects, so a session of n blocks costs n hashes in
    all; the memo checks the predecessor's key, so a shared Block in another context is
    re-keyed rather than trusted."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[object, str, str]] = {}  # id(block) → (block, prev key, key)

    def keys(self, tokens, blocks) -> list[str]:
        out, prev = [], ROOT
        for first, last in forward_groups(blocks):
            g0, g1 = blocks[first].start, blocks[last].end
            for b in blocks[first:last + 1]:
                shape = (b.start - g0, g1 - g0)
                hit = self._memo.get(id(b))
                if hit is not None and hit[0] is b and hit[1] == (prev, shape):
                    key = hit[2]
                else:
                    key = page_key(prev, b.kind, b.prefill, tokens[b.start:b.end], shape)
                    self._memo[id(b)] = (b, (prev, shape), key)  # holds b, so its id is not reused
                out.append(key)
                prev = key
        return out

    def copy(self) -> "PageKeys":
        other = PageKeys()
        other._memo = dict(self._memo)
        return other


ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}


def page_layout(page) -> dict:
    L, _, h, _, d = page.shape
    return {"dtype": str(page.dtype).removeprefix("torch."), "layers": L, "kv_heads": h, "head_dim": d}


def to_bytes(page) -> bytes:
    import torch

    return page.detach().to("cpu").contiguous().view(torch.uint8).numpy().tobytes()


def from_bytes(blob: bytes, layout: dict, device):
    """The page stored as `blob`. On the CPU a read-only view of the blob's own bytes (no copy:
    the bytes whose digest was checked are the bytes read); its reader copies it and never writes it."""
    import warnings

    import torch

    dtype = getattr(torch, layout["dtype"])
    with warnings.catch_warnings():  # bytes are immutable: torch warns that writes would be undefined
        warnings.simplefilter("ignore", UserWarning)
        flat = torch.frombuffer(blob, dtype=torch.uint8).view(dtype)
    L, h, d = layout["layers"], layout["kv_heads"], layout["head_dim"]
    return flat.reshape(L, 2, h, -1, d).to(device)
