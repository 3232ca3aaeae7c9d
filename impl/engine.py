"""KVEngine: prefill, decode, crop and clone over a transformers causal LM, with counters.

The engine runs the canonical schedule that defines F's bits (DESIGN: "bit-exact"): one
forward per prefilled block, one forward per decoded token, batch size 1, a pinned thread
count, deterministic algorithms. `TorchLM` puts it behind the LM interface that the shared
scaffold (`unsee.model.state.step`) calls, so the agent semantics and the provenance graph
are the reference's, and only θ differs.
"""

from __future__ import annotations

import copy
import hashlib
import os
import time
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from unsee.impl.pages import PageKeys, page_layout
from unsee.model.session import UnseeError


class ExactnessError(UnseeError, ValueError):
    """A configuration that would silently break bit-exactness."""


def pin_determinism(device: torch.device, threads: int) -> None:
    """Same bits every run: one thread count, deterministic kernels (CUDA needs the
    cuBLAS workspace setting before its first call)."""
    torch.set_num_threads(threads)
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = False
        torch.use_deterministic_algorithms(True)


def check_exact_config(model) -> None:
    cfg = model.config
    impl = getattr(cfg, "_attn_implementation", None) or "eager"
    if impl not in ("eager", "sdpa"):
        raise ExactnessError(f"attention implementation {impl!r} is not deterministic here; load with "
                             "attn_implementation='eager' or 'sdpa'")
    if model.training:
        raise ExactnessError("the model is in training mode (dropout); call model.eval()")
    # Sliding-window layers: the engine's plain DynamicCache keeps every position, so a crop
    # never needs positions that a sliding cache would have dropped.


class KVEngine:
    """One session's cache over a shared model. Counts forwards and tokens."""

    def __init__(self, model, device: torch.device, threads: int = 1) -> None:
        check_exact_config(model)
        self.model = model
        self.device = device
        self.threads = threads
        pin_determinism(device, threads)
        self.cache = DynamicCache()
        self.logits: torch.Tensor | None = None  # [V] after the last forward
        self.forwards = 0
        self.tokens_prefilled = 0
        self.tokens_decoded = 0

    def __len__(self) -> int:
        return self.cache.get_seq_length()

    @torch.inference_mode()
    def _forward(self, ids: list[int]) -> None:
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)  # [1, S]
        out = self.model(input_ids=input_ids, cache=self.cache, use_cache=True)
        self.logits = out.logits[0, -1].float()  # [V]
        self.forwards += 1

    def reset(self) -> None:
        self.release()
        self.cache = DynamicCache()
        self.logits = None

    def prefill(self, ids) -> None:
        """One block as one forward."""
        ids = list(ids)
        if ids:
            self._forward(ids)
            self.tokens_prefilled += len(ids)

    def decode(self, n: int, draws=None, temperature: float = 1.0) -> tuple[int, ...]:
        """n tokens, one forward each; greedy, or sampled with one seeded generator per token.
        Every decoded token is fed back, so the cache holds all of them."""
        if n and self.logits is None:
            raise UnseeError("decode needs logits from a prefill first (prefill a header)")
        out = []
        for i in range(n):
            if draws is None:
                tok = int(torch.argmax(self.logits))
            else:
                g = torch.Generator(device="cpu").manual_seed(int(draws[i]))
                probs = torch.softmax(self.logits.cpu() / temperature, dim=-1)
                tok = int(torch.multinomial(probs, 1, generator=g))
            out.append(tok)
            self._forward([tok])
            self.tokens_decoded += 1
        return tuple(out)

    @torch.inference_mode()
    def prefill_logits(self, ids) -> torch.Tensor:
        """One forward over a block, returning the logits at every position: [S, V]."""
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
        out = self.model(input_ids=input_ids, cache=self.cache, use_cache=True)
        self.forwards += 1
        self.tokens_prefilled += len(ids)
        self.logits = out.logits[0, -1].float()
        return out.logits[0].float()

    def append_rows(self, source: DynamicCache, start: int, end: int) -> None:
        """Reuse positions [start, end) of another cache (a prefix-cache hit): no compute."""
        with torch.inference_mode():
            for layer, src in zip(self.cache.layers, source.layers):
                layer.keys = torch.cat([layer.keys, src.keys[..., start:end, :]], dim=-2)
                layer.values = torch.cat([layer.values, src.values[..., start:end, :]], dim=-2)
        self.logits = None

    def rows(self, start: int, end: int) -> torch.Tensor:
        """A copy of positions [start, end) of every layer: [layers, 2, kv_heads, n, head_dim]."""
        with torch.inference_mode():
            return torch.stack([torch.stack((k[0, :, start:end, :], v[0, :, start:end, :]))
                                for k, v in self.kv_tensors()]).clone()

    def append_pages(self, pages) -> None:
        """Append K/V pages (as `rows` returns them) after the resident positions: no compute."""
        with torch.inference_mode():
            block = torch.cat([p.to(self.device) for p in pages], dim=3)  # [L, 2, h, n, d]
            for i, layer in enumerate(self.cache.layers):
                layer.keys = torch.cat([layer.keys, block[i, 0].unsqueeze(0)], dim=-2)
                layer.values = torch.cat([layer.values, block[i, 1].unsqueeze(0)], dim=-2)
        self.logits = None

    def teacher_force(self, ids) -> None:
        """Recorded decoded tokens, fed with the same shapes as the original decode."""
        for tok in ids:
            self._forward([int(tok)])

    def crop(self, length: int) -> None:
        """Keep the first `length` positions; overwrite and release the dropped K/V bytes."""
        n = len(self)
        if length > n:
            raise UnseeError(f"cannot crop a cache of {n} positions to {length}")
        if length == n:
            return
        for layer in self.cache.layers:
            if not getattr(layer, "is_initialized", False) or layer.keys is None or layer.keys.numel() == 0:
                continue
            with torch.inference_mode():
                layer.keys[..., length:, :].zero_()
                layer.values[..., length:, :].zero_()
                layer.keys = layer.keys[..., :length, :].clone()  # fresh storage: no dropped bytes behind it
                layer.values = layer.values[..., :length, :].clone()
        self.logits = None

    def select(self, positions) -> None:
        """Keep only the given positions (used by the span-excision mutants)."""
        idx = torch.tensor(list(positions), dtype=torch.long, device=self.device)
        with torch.inference_mode():
            for layer in self.cache.layers:
                if getattr(layer, "is_initialized", False) and layer.keys is not None and layer.keys.numel():
                    layer.keys = layer.keys.index_select(-2, idx).clone()
                    layer.values = layer.values.index_select(-2, idx).clone()
        self.logits = None

    def release(self) -> None:
        """Overwrite every K/V byte before dropping the cache."""
        for layer in getattr(self.cache, "layers", []):
            if getattr(layer, "is_initialized", False) and layer.keys is not None:
                with torch.inference_mode():
                    layer.keys.zero_()
                    layer.values.zero_()

    def clone(self) -> "KVEngine":
        """A branch with its own cache over the same model (for paired comparisons)."""
        other = KVEngine.__new__(KVEngine)
        other.__dict__.update(self.__dict__)
        other.cache = copy.deepcopy(self.cache)
        other.logits = None if self.logits is None else self.logits.clone()
        return other

    def kv_tensors(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(layer.keys, layer.values) for layer in self.cache.layers
                if getattr(layer, "is_initialized", False) and layer.keys is not None]

    @torch.inference_mode()
    def probe(self, ids) -> torch.Tensor:
        """Next-token logits after `ids`, on a throwaway copy of the cache."""
        branch = self.clone()
        branch._forward(list(ids))
        logits = branch.logits.clone()
        branch.release()
        return logits


def tensor_digest(tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(str(tuple(t.shape)).encode())
        h.update(t.detach().to("cpu").contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class KVRef:
    """The cache a state refers to: its length in context tokens and the engine epoch
    (bumped whenever the cache is rebuilt). Only the live state's ref is resident."""

    length: int
    epoch: int


class TorchLM:
    """The LM interface of `unsee.model.state` over a KVEngine and a chat template."""

    def __init__(self, bundle, device: torch.device | None = None, threads: int = 1) -> None:
        self.bundle = bundle
        self.name = bundle.name
        self.template = bundle.template
        self.engine = KVEngine(bundle.model, device or bundle.device, threads)
        self.epoch = 0
        self.bos = tuple(self.template.bos())
        self.prefix = None  # (tokens, cache) of the resident cache a full reset may reuse (B5′)
        self.forced = None  # (mode, [recorded outputs]) for turns marked independent
        self.hits = 0
        self.ctx: list[int] = []  # the context tokens, to match against the prefix cache
        # K/V pages (see unsee.impl.pages): captured after every transition when kv_pages is on;
        # `page_source(key)` reads a page persisted by an earlier process (a store), or None.
        self.kv_pages = True
        self.keys = PageKeys()
        self.pages: dict[str, torch.Tensor] = {}  # key → [layers, 2, kv_heads, n, head_dim]
        self.page_source = None
        self.chain: list[tuple[object, str]] = []  # (block, key) of the resident context, in order
        self.capture_seconds = 0.0  # time spent slicing pages out of the cache (page-write overhead)

    # -- fast paths: opt-in, each reports what it guarantees where it is used -------------
    def set_prefix_cache(self, kv: KVRef, tokens) -> None:
        self._live(kv)
        self.prefix = (tuple(tokens), copy.deepcopy(self.engine.cache))

    def force(self, outputs, mode: str | None = None) -> None:
        self.forced = None if outputs is None else (mode, list(outputs))

    def branch(self) -> "TorchLM":
        """The same θ with a cloned cache: a paired branch of the current state."""
        other = copy.copy(self)
        other.engine = self.engine.clone()
        other.keys, other.pages, other.chain = self.keys.copy(), dict(self.pages), list(self.chain)
        return other

    # -- tokens ---------------------------------------------------------------------------
    def encode(self, kind: str, text: str) -> tuple[int, ...]:
        return tuple(self.template.block(kind, text))

    def header(self, purpose: str) -> tuple[int, ...]:
        return tuple(self.template.header(purpose))

    # -- the cache --------------------------------------------------------------------------
    def _live(self, kv: KVRef) -> None:
        if kv.epoch != self.epoch or kv.length + len(self.bos) != len(self.engine):
            raise UnseeError(f"cache handle {kv} is not resident (engine epoch {self.epoch}, "
                             f"length {len(self.engine)}); restore it from a checkpoint first")

    def resident(self, kv) -> bool:
        return isinstance(kv, KVRef) and kv.epoch == self.epoch and kv.length + len(self.bos) == len(self.engine)

    def _ref(self) -> KVRef:
        return KVRef(len(self.engine) - len(self.bos), self.epoch)

    def empty(self) -> KVRef:
        self.engine.reset()
        self.epoch += 1
        self.engine.prefill(self.bos)
        self.ctx = []
        self.chain = []
        return self._ref()

    def prefill(self, kv: KVRef, tokens, logits: bool = False) -> KVRef:
        self._live(kv)
        tokens = list(tokens)
        n, b = len(self.ctx), len(self.bos)
        if (self.prefix and not logits and tokens and list(self.prefix[0][:n]) == self.ctx
                and list(self.prefix[0][n:n + len(tokens)]) == tokens):
            # a whole block inside the resident prefix: reuse its rows (same schedule, same bits)
            self.engine.append_rows(self.prefix[1], b + n, b + n + len(tokens))
            self.hits += len(tokens)
        else:
            self.engine.prefill(tokens)
        self.ctx += tokens
        return self._ref()

    def decode(self, kv: KVRef, n: int, draws):
        self._live(kv)
        out = None
        if self.forced and self.forced[1]:
            mode, queue = self.forced
            rec = tuple(int(t) for t in queue.pop(0))
            if len(rec) == n and mode == "oracle":
                self.engine.prefill(rec)  # recorded tokens in one parallel prefill: not bit-exact
                out = rec
            elif len(rec) == n and mode == "verify" and draws is None and n:
                out = self._verify(rec)
        if out is None:
            out = self.engine.decode(n, draws)
        self.ctx += list(out)
        return out, self._ref()

    def _verify(self, rec: tuple[int, ...]) -> tuple[int, ...]:
        """Check the recorded tokens against the model in one prefill; keep them up to the
        first token greedy decoding would not have produced, and decode from there."""
        start = len(self.engine)
        head_logits = self.engine.logits  # after the header prefill: predicts rec[0]
        block = self.engine.prefill_logits(rec)  # [n, V]: block[i] predicts rec[i + 1]
        preds = [int(torch.argmax(head_logits))] + [int(t) for t in torch.argmax(block[:-1], dim=-1)]
        k = next((i for i, (p, r) in enumerate(zip(preds, rec)) if p != r), len(rec))
        if k == len(rec):
            return rec
        self.engine.crop(start + k)
        self.engine.logits = head_logits if k == 0 else block[k - 1]
        return rec[:k] + self.engine.decode(len(rec) - k)

    def crop(self, kv: KVRef, n: int) -> KVRef:
        self._live(kv)
        self.engine.crop(len(self.bos) + n)
        self.ctx = self.ctx[:n]
        self.chain = [(b, k) for b, k in self.chain if b.end <= n]
        return self._ref()

    def rebuild(self, tokens, blocks) -> tuple[KVRef, int]:
        """The cache of a context given as recorded tokens and blocks, bit for bit as the
        canonical schedule computed it. Returns (ref, tokens computed).

        Leading blocks still resident at the same positions are kept (a compaction keeps its
        system blocks); then blocks with a K/V page are read back; the rest is re-materialized
        on the canonical schedule (each block's prefill as one forward, its decoded tokens
        teacher-forced one per forward)."""
        tokens = list(tokens)
        keys = self.keys.keys(tokens, blocks)
        keep = 0
        while keep < min(len(keys), len(self.chain)) and self.chain[keep][1] == keys[keep]:
            keep += 1
        if keep and len(self.engine) < len(self.bos) + blocks[keep - 1].end:
            keep = 0
        if keep:
            end = blocks[keep - 1].end
            self.engine.crop(len(self.bos) + end)
            self.epoch += 1
        else:
            self.empty()
        pages = []
        while keep + len(pages) < len(blocks) and self.kv_pages:
            page = self.page(keys[keep + len(pages)])
            if page is None:
                break
            pages.append(page)
        if pages:
            self.engine.append_pages(pages)
        computed = 0
        for b in blocks[keep + len(pages):]:
            self.engine.prefill(tokens[b.start:b.start + b.prefill])
            self.engine.teacher_force(tokens[b.start + b.prefill:b.end])
            computed += b.end - b.start
        self.ctx = tokens
        self.chain = list(zip(blocks, keys))
        kv = self._ref()
        if kv.length != len(tokens):
            raise UnseeError(f"re-materialized {kv.length} positions for {len(tokens)} recorded tokens")
        return kv, computed

    # -- K/V pages ----------------------------------------------------------------------------
    def page(self, key: str) -> torch.Tensor | None:
        if key in self.pages:
            return self.pages[key]
        return None if self.page_source is None else self.page_source(key)

    def after_step(self, state) -> None:
        """Capture the K/V rows of every block of R_t not paged yet (each block once)."""
        if not self.resident(state.kv):
            raise UnseeError("after_step: the state's cache is not the resident one")
        keys = self.keys.keys(state.tokens, state.blocks)
        self.chain = list(zip(state.blocks, keys))
        if not self.kv_pages:
            return
        t0 = time.perf_counter()
        b = len(self.bos)
        for blk, key in self.chain:
            if key not in self.pages:
                self.pages[key] = self.engine.rows(b + blk.start, b + blk.end)
        self.capture_seconds += time.perf_counter() - t0

    def page_layout(self) -> dict:
        return page_layout(self.engine.rows(0, 1))

    def select(self, kv: KVRef, positions) -> KVRef:
        self._live(kv)
        b = len(self.bos)
        self.engine.select(list(range(b)) + [p + b for p in positions])
        self.ctx = [self.ctx[p] for p in positions]
        self.chain = []  # the rows left are no block's rows at their positions
        return self._ref()

    def kv_digest(self, kv: KVRef) -> str:
        self._live(kv)
        return tensor_digest(t for pair in self.engine.kv_tensors() for t in pair)
