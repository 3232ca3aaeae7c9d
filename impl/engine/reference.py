"""The reference model (`unsee.model.lm`) behind the engine's interface: the same θ, with the two
fast paths an engine offers (a recorded reply checked as a draft, B5′'s prefix cache) and the counts
of what each call computed. `unsee run --model reference` and the benchmarks run it, so that the
pure-Python model is metered exactly as a transformers model is (`unsee.impl.engine.metered`).

Here a prefill and a decode give the same bits, so a draft is checked token by token.
"""

from __future__ import annotations

from unsee.model.lm import END, ReferenceLM, decode, extend, masked_token, next_token


def constrained(kv, n: int, draw_list, hint, schema):
    """`unsee.model.lm.constrained` with a draft (`hint`): checked token by token against the
    choices, decoding resumes at the first disagreement. Returns (tokens, kv, tokens decoded one
    forward at a time, draft tokens extended as they were checked)."""
    m = schema.matcher()
    out: list[int] = []
    decoded = verified = 0
    draft = list(hint) if hint is not None else []
    while len(out) < n:
        allowed = [ord(c) for c in m.allowed()] + ([END] if m.complete() else [])
        tok = masked_token(kv, allowed, None if draw_list is None else draw_list[len(out)])
        if len(out) < len(draft) and draft[len(out)] == tok:
            verified += 1
        else:
            draft, decoded = [], decoded + 1
        out.append(tok)
        kv = extend(kv, (tok,))
        if tok == END:
            break
        m.consume(chr(tok))
    return tuple(out), kv, decoded, verified


class ReferenceEngine(ReferenceLM):
    """The reference LM with the engine's interface (see `unsee.impl.engine.metered.EngineLM`)."""

    kv_pages = False  # its cache is a value: nothing to page
    template = None  # no chat template: its tokens are words' hashes

    def prefix_cache(self, kv, tokens):
        """B5′: the resident cache `kv` of `tokens`, for `prefill(reuse=...)`."""
        return (tuple(tokens), kv)

    def prefill(self, kv, tokens, logits: bool = False, reuse=None):
        """`reuse`: a prefix cache (`prefix_cache`); a block whose tokens continue its
        byte-identical prefix takes its entries instead of computing them."""
        n, tokens = len(kv), tuple(tokens)
        if not logits and self.reuses(kv, tokens, reuse):
            return reuse[1][:n + len(tokens)]
        return extend(kv, tokens)

    def reuses(self, kv, tokens, reuse) -> bool:
        """Would `prefill(kv, tokens, reuse=reuse)` take the block's entries from the prefix
        cache (no compute)? Yes when the block continues its byte-identical prefix at kv's end."""
        n, tokens = len(kv), tuple(tokens)
        return bool(reuse) and bool(tokens) and reuse[0][:n + len(tokens)] == reuse[0][:n] + tokens \
            and reuse[1][:n] == kv

    def decode(self, kv, n: int, draw_list, hint=None, constraint=None, head=()):
        """F's model turn (`ReferenceLM.decode`), from a draft. Returns (tokens, kv, tokens decoded one
        forward at a time, tokens verified: the draft's tokens extended as they were checked).

        `hint` (a recorded reply) is a draft: every token of it is checked against the choice the
        context makes, and only from the first disagreement on is the rest decoded. The answer does
        not depend on the hint (the reply is the unique fixed point), only its cost."""
        kv = extend(kv, tuple(head))
        if constraint is not None:
            return constrained(kv, n, draw_list, hint, constraint)
        if n == 0:
            return (), kv, 0, 0
        k = 0
        if hint is not None and len(hint) == n:
            while k < n and next_token(kv, None if draw_list is None else draw_list[k]) == hint[k]:
                kv = extend(kv, (hint[k],))
                k += 1
        if k == n:
            return tuple(hint), kv, 0, n
        rest, kv = decode(kv, n - k, None if draw_list is None else draw_list[k:])
        return (tuple(hint[:k]) if k else ()) + rest, kv, n - k, k

    def decode_cost(self, n: int, head: int = 0) -> int:
        """Decoding n tokens without a draft: n one-token extends (a checked draft costs the same;
        the header is one prefill either way)."""
        return n

    def rebuild(self, tokens, blocks):
        """Returns (kv, tokens computed): the reference keeps no pages, so it computes them all."""
        return extend((), tuple(tokens)), len(tokens)

    load_seconds = None  # nothing to load

    def identity(self) -> dict:
        """Nothing besides its name decides its bits (`unsee.impl.store.digests.identity_of`)."""
        return {}

    def prepare_grammar(self) -> None:
        """Its grammar needs no tokenizer: nothing to build at open."""

    def branch(self) -> "ReferenceEngine":
        """The same θ for a paired branch: its caches are values, so nothing is shared that changes."""
        return self

    def after_step(self, state) -> None:
        """Nothing to capture: the reference keeps no pages."""

    def record_events(self) -> None:
        """The reference records no engine events (`unsee.specs.traces` checks an engine's)."""

    def stop_recording(self) -> None:
        pass


REFERENCE_ENGINE = ReferenceEngine()
