"""A deterministic reference language model over integer tokens.

The reference model stands in for θ in Eq. (1). Its "KV cache" is the tuple of prefix
hashes, one per context position, so it has the property that makes splicing delicate in
a real transformer: every position's entry, and therefore every generated token, depends
on the *entire* context before it. Any splice error (a stale entry after an excised span,
a crop one block too late) changes every later token.
"""

from __future__ import annotations

import hashlib
import random
import zlib
from typing import Any, Protocol

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


class LM(Protocol):
    """θ behind the transition F: what `unsee.model.state.step` and Algorithm 1 ask of a language
    model. `kv` is the model's cache handle (a value here; an engine's reference to its resident
    cache in `unsee.impl.engine`).

    `decode` is a model turn: the header `head` (a prompt the turn opens with) then the reply of n
    tokens (at most n under a `constraint` from `grammar`); it returns (reply, kv). `rebuild` brings
    back the cache of a recorded context on the canonical schedule; `select` keeps the cache rows
    at the given positions (what the in-place edits of `unsee.model.edits` do)."""

    name: str

    def encode(self, kind: str, text: str) -> tuple[int, ...]: ...
    def header(self, purpose: str, tool: str | None = None) -> tuple[int, ...]: ...
    def grammar(self, tool) -> Any: ...
    def json_text(self, tokens) -> str: ...
    def empty(self) -> Any: ...
    def prefill(self, kv: Any, tokens) -> Any: ...
    def decode(self, kv: Any, n: int, draw_list, constraint=None, head=()) -> tuple[tuple[int, ...], Any]: ...
    def crop(self, kv: Any, n: int) -> Any: ...
    def kv_length(self, kv: Any) -> int: ...
    def resident(self, kv: Any) -> bool: ...
    def rebuild(self, tokens, blocks) -> Any: ...
    def select(self, kv: Any, positions) -> Any: ...
    def kv_digest(self, kv: Any) -> str: ...


END = VOCAB  # the reference's end-of-call token: a constrained reply ends with it


def masked_token(kv: tuple[int, ...], allowed, draw: int | None) -> int:
    """The choice among `allowed` tokens (a mask): the best-scoring one, or with a draw one of the
    four best. Every score is a function of kv[-1], i.e. of the entire context."""
    h = kv[-1] if kv else 0
    ranked = sorted(allowed, key=lambda t: (-(((h ^ (t * 0x9E3779B97F4A7C15)) * _MUL) % _MOD), t))
    return ranked[0] if draw is None else ranked[draw % min(4, len(ranked))]


def constrained(kv, n: int, draw_list, schema):
    """A reply of at most n tokens whose bytes are a JSON document of `schema`, then END.

    Token i is the choice among the tokens the matcher allows after tokens 0..i−1, so the mask is a
    function of the reply so far and the reply is still the unique fixed point of the choices.
    Returns (tokens, kv)."""
    m = schema.matcher()
    out: list[int] = []
    while len(out) < n:
        allowed = [ord(c) for c in m.allowed()] + ([END] if m.complete() else [])
        tok = masked_token(kv, allowed, None if draw_list is None else draw_list[len(out)])
        out.append(tok)
        kv = extend(kv, (tok,))
        if tok == END:
            break
        m.consume(chr(tok))
    return tuple(out), kv


class ReferenceLM:
    """The reference model behind the `LM` interface that `step` uses.

    The same interface is implemented over a transformers model by the engine
    (`unsee.impl.engine`); the scaffold (agent semantics and provenance) is shared, the model is
    what differs. kv here is the tuple of prefix hashes, an immutable value, and the model holds
    no state."""

    name = "reference"

    def encode(self, kind: str, text: str) -> tuple[int, ...]:
        return tokenize(text)

    def header(self, purpose: str, tool: str | None = None) -> tuple[int, ...]:
        return ()

    def grammar(self, tool):
        """The constraint of a call to `tool`: its argument schema, read one byte token at a time."""
        return tool.arguments

    def json_text(self, tokens) -> str:
        """The text of a constrained reply: its byte tokens, the end token dropped."""
        return bytes(t for t in tokens if t < 256).decode("ascii")

    def empty(self) -> tuple[int, ...]:
        return ()

    def prefill(self, kv, tokens):
        return extend(kv, tuple(tokens))

    def decode(self, kv, n: int, draw_list, constraint=None, head=()):
        """F's model turn: the header `head` prefilled, then the reply: n tokens, each the choice
        after the context and the tokens before it (at most n under `constraint`, see `constrained`).
        Returns (tokens, kv)."""
        kv = extend(kv, tuple(head))
        if constraint is not None:
            return constrained(kv, n, draw_list, constraint)
        return decode(kv, n, draw_list)

    def crop(self, kv, n: int):
        return kv[:n]

    def kv_length(self, kv) -> int:
        """Context tokens the cache holds (one prefix hash each)."""
        return len(kv)

    def resident(self, kv) -> bool:
        return kv is not None  # a value is at hand unless a store left it out

    def rebuild(self, tokens, blocks):
        """The cache of recorded tokens on the canonical schedule (here one extend)."""
        return extend((), tuple(tokens))

    def select(self, kv, positions):
        return tuple(kv[i] for i in positions)

    def kv_digest(self, kv) -> str:
        return hashlib.sha256(repr(kv).encode()).hexdigest()[:16]


REFERENCE = ReferenceLM()  # stateless: every call is a function of its arguments
