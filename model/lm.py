"""A deterministic reference language model over integer tokens.

The reference model stands in for θ in Eq. (1). Its "KV cache" is the tuple of prefix
hashes, one per context position, so it has the property that makes splicing delicate in
a real transformer: every position's entry, and therefore every generated token, depends
on the *entire* context before it. Any splice error (a stale entry after an excised span,
a crop one block too late) changes every later token.
"""

from __future__ import annotations

import random
import zlib

VOCAB = 4096
_MOD = (1 << 61) - 1  # a Mersenne prime: the rolling hash never collapses to a short cycle
_MUL = 1_000_003


def tokenize(text: str) -> tuple[int, ...]:
    """Words → token ids in [0, VOCAB). Stable across processes (crc32, not hash())."""
    return tuple(zlib.crc32(word.encode()) % VOCAB for word in text.split())


def detokenize(tokens: tuple[int, ...]) -> str:
    return " ".join(f"w{t}" for t in tokens)


def extend(kv: tuple[int, ...], tokens: tuple[int, ...]) -> tuple[int, ...]:
    """Prefill: append one prefix hash per token. kv: [n] → [n + len(tokens)]."""
    h = kv[-1] if kv else 0
    out = list(kv)
    for tok in tokens:
        h = (h * _MUL + tok + 1) % _MOD
        out.append(h)
    return tuple(out)


def next_token(kv: tuple[int, ...], draw: int | None) -> int:
    """Greedy when draw is None; otherwise pick one of four candidates with the draw.

    Every candidate is a function of kv[-1], i.e. of the entire context.
    """
    h = kv[-1] if kv else 0
    candidates = [((h >> (13 * j)) ^ (h * (j + 7))) % VOCAB for j in range(4)]
    return candidates[0] if draw is None else candidates[draw % 4]


def draws(seed: int | None, turn: int, salt: int, n: int) -> list[int | None]:
    """The sampler's randomness for one decode, derived from (seed, transition, salt).

    Deriving draws from the transition index (rather than one generator threaded through
    the session) is what lets a replay from τ draw exactly what a full reset draws (A1).
    seed=None with sampling means an unseeded sampler: each call draws fresh entropy, which
    breaks A1 on purpose so that the specs can show it is detected.
    """
    if seed is None:
        rng = random.SystemRandom()
    else:
        rng = random.Random(f"{seed}:{turn}:{salt}")
    return [rng.randrange(1 << 30) for _ in range(n)]


def decode(kv: tuple[int, ...], n: int, draw_list: list[int | None] | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Decode n tokens one at a time, each appended to the context before the next.

    Returns (tokens, new kv). draw_list None means greedy.
    """
    out: list[int] = []
    for i in range(n):
        tok = next_token(kv, None if draw_list is None else draw_list[i])
        out.append(tok)
        kv = extend(kv, (tok,))
    return tuple(out), kv


class ReferenceLM:
    """The reference model behind the LM interface that `step` uses.

    The same interface is implemented over a transformers model by `unsee.impl.engine.TorchLM`;
    the scaffold (agent semantics and provenance) is shared, the model is what differs.
    kv here is the tuple of prefix hashes, an immutable value.
    """

    name = "reference"

    def __init__(self) -> None:
        self.prefix = None  # (tokens, kv) of a resident cache a full reset may reuse (B5′)
        self.forced = None  # ("oracle", [recorded outputs]): the bench's labelled comparison
        self.hits = 0

    # -- fast paths: each reports what it guarantees where it is used --------------------
    def set_prefix_cache(self, kv, tokens) -> None:
        self.prefix = (tuple(tokens), kv)

    def force(self, outputs, mode: str | None = None) -> None:
        self.forced = None if outputs is None else (mode, list(outputs))

    def encode(self, kind: str, text: str) -> tuple[int, ...]:
        return tokenize(text)

    def header(self, purpose: str) -> tuple[int, ...]:
        return ()

    def empty(self) -> tuple[int, ...]:
        return ()

    def prefill(self, kv, tokens, logits: bool = False):
        n, tokens = len(kv), tuple(tokens)
        if self.prefix and not logits and tokens and self.prefix[0][:n + len(tokens)] == self.prefix[0][:n] + tokens \
                and self.prefix[1][:n] == kv:
            self.hits += len(tokens)
            return self.prefix[1][:n + len(tokens)]
        return extend(kv, tokens)

    def decode(self, kv, n: int, draw_list, hint=None):
        """F's reply: n tokens, each the choice after the context and the tokens before it.
        Returns (tokens, kv, tokens decoded one forward at a time).

        `hint` (a recorded reply) is a draft: every token of it is checked against the choice
        the context makes, and only from the first disagreement on is the rest decoded. The
        answer does not depend on the hint (the reply is the unique fixed point), only its cost.
        Here a prefill and a decode give the same bits, so the check is exact token by token."""
        if self.forced and self.forced[1]:
            mode, queue = self.forced
            rec = tuple(queue.pop(0))
            if len(rec) == n and mode == "oracle":  # a labelled comparison: trusts the marking
                return rec, extend(kv, rec), 0
        if n == 0:
            return (), kv, 0
        k = 0
        if hint is not None and len(hint) == n:
            while k < n and next_token(kv, None if draw_list is None else draw_list[k]) == hint[k]:
                kv = extend(kv, (hint[k],))
                k += 1
        if k == n:
            return tuple(hint), kv, 0
        rest, kv = decode(kv, n - k, None if draw_list is None else draw_list[k:])
        return (tuple(hint[:k]) if k else ()) + rest, kv, n - k

    def crop(self, kv, n: int):
        return kv[:n]

    def resident(self, kv) -> bool:
        return kv is not None  # a value is at hand unless a store left it out

    def rebuild(self, tokens, blocks):
        """Re-materialize a cache from recorded tokens on the canonical schedule (here one extend).
        Returns (kv, tokens computed): the reference keeps no pages, so it computes them all."""
        return extend((), tuple(tokens)), len(tokens)

    def snapshot(self, kv):
        """A copy of a cache, for the post-τ-cache mutant (specs.mutants) to graft back."""
        return kv

    def graft(self, kv, old):
        """The mutant's mistake: the first min(len) rows taken from a snapshot `old`."""
        n = min(len(old), len(kv))
        return old[:n] + kv[n:]

    def after_step(self, state) -> None:
        """Called with each new state R_t; a real engine persists the K/V it computed."""

    def select(self, kv, positions):
        return tuple(kv[i] for i in positions)

    def kv_digest(self, kv) -> str:
        import hashlib

        return hashlib.sha256(repr(kv).encode()).hexdigest()[:16]


REFERENCE = ReferenceLM()  # stateless unless a fast path is switched on for one operator
