"""Constrained decoding for the real runtime: a tool call's JSON arguments under its schema.

`grammar(template, tool)` gives what `TorchLM.decode(constraint=...)` reads: a factory of
matchers, each of which says which tokens may come next (`mask`), takes the chosen one
(`consume`), and knows the end token. Two backends, one contract:

- a model with its own tokenizer (SmolLM2, the organisms) decodes under llguidance's JSON-schema
  grammar over that tokenizer, ending with the chat template's end-of-turn token;
- the tiny random-weight families (`WordTemplate`, a word-level vocabulary) reserve their top
  256 ids as bytes and decode under the reference's automaton (`unsee.model.grammar`).

Either way the mask after a prefix is a function of that prefix alone, so a constrained reply is
still the unique fixed point of the model's choices (`KVEngine.fixed_point`).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from unsee.model.grammar import closed
from unsee.model.session import UnseeError


class ByteMatcher:
    def __init__(self, grammar: "ByteGrammar") -> None:
        self.g = grammar
        self.m = grammar.schema.matcher()
        self.stopped = False

    def mask(self) -> torch.Tensor:
        out = torch.zeros(self.g.vocab, dtype=torch.bool)
        if not self.stopped:
            for c in self.m.allowed():
                out[self.g.base + ord(c)] = True
            if self.m.complete():
                out[self.g.end] = True
        return out

    def consume(self, token: int) -> None:
        if token == self.g.end:
            self.stopped = True
        else:
            self.m.consume(chr(token - self.g.base))


class ByteGrammar:
    """A schema over a word-level vocabulary's byte ids [vocab − 256, vocab), ending with `end`."""

    def __init__(self, schema, vocab: int, end: int) -> None:
        self.schema, self.vocab, self.end, self.base = schema, vocab, end, vocab - 256

    def matcher(self) -> ByteMatcher:
        return ByteMatcher(self)


class LLMatcher:
    def __init__(self, grammar: "LLGrammar") -> None:
        import llguidance

        self.g = grammar
        self.m = llguidance.LLMatcher(grammar.tokenizer, grammar.source)
        if self.m.is_error():
            raise UnseeError(f"the JSON grammar of tool {grammar.name!r} failed: {self.m.get_error()}")

    def mask(self) -> torch.Tensor:
        bits = np.unpackbits(np.frombuffer(self.m.compute_bitmask(), dtype=np.uint8), bitorder="little")
        out = torch.zeros(self.g.vocab, dtype=torch.bool)
        n = min(self.g.vocab, bits.size)
        out[:n] = torch.from_numpy(bits[:n].astype(bool))
        return out

    def consume(self, token: int) -> None:
        if not self.m.consume_token(int(token)):
            raise UnseeError(f"token {token} does not continue the JSON arguments of {self.g.name!r}: "
                             f"{self.m.get_error()}")


class LLGrammar:
    """A schema under llguidance over a Hugging Face tokenizer, ending with `end`."""

    def __init__(self, tool, hf_tokenizer, vocab: int, end: int) -> None:
        import json

        import llguidance

        self.name, self.vocab, self.end = tool.name, vocab, end
        self.tokenizer = _lltokenizer(hf_tokenizer, vocab, end)
        self.source = llguidance.LLMatcher.grammar_from_json_schema(
            closed(json.loads(tool.schema)), defaults={"whitespace_flexible": False})

    def matcher(self) -> LLMatcher:
        return LLMatcher(self)


_TOKENIZERS: dict = {}


def _lltokenizer(hf_tokenizer, vocab: int, end: int):
    """llguidance's tokenizer over `hf_tokenizer` (built once per process: about 0.2 s)."""
    key = (id(hf_tokenizer), vocab, end)
    if key not in _TOKENIZERS:
        import llguidance

        backend = getattr(hf_tokenizer, "backend_tokenizer", None)
        if backend is not None and backend.padding is None and backend.truncation is None:
            # the JSON `llguidance.hf.from_tokenizer` builds from, without the copy of the tokenizer
            # it makes only to switch padding and truncation off (off here already)
            built = llguidance.LLTokenizer(backend.to_str(), n_vocab=vocab, eos_token=end)
        else:
            import llguidance.hf

            built = llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=vocab, eos_token=end)
        _TOKENIZERS[key] = (hf_tokenizer, built)
    return _TOKENIZERS[key][1]


def prepare(template, vocab: int) -> None:
    """Build what `grammar` needs for this template once, ahead of the first constrained reply."""
    tok = getattr(template, "tok", None)
    if tok is not None:
        _lltokenizer(tok, vocab, end_token(template))


@lru_cache(maxsize=256)
def _byte_grammar(tool, vocab: int, end: int) -> ByteGrammar:
    return ByteGrammar(tool.arguments, vocab, end)


def grammar(template, tool, vocab: int):
    """The constraint of a call to `tool` under this chat template, over a model of `vocab` logits."""
    tok = getattr(template, "tok", None)
    if tok is None:
        return _byte_grammar(tool, vocab, end_token(template))
    return _llgrammar(tool, tok, vocab, end_token(template))


def end_token(template) -> int:
    """The token a constrained reply ends with: the chat template's end of turn."""
    tok = getattr(template, "tok", None)
    if tok is None:
        return template.SPECIAL["im_end"]
    end = tok.convert_tokens_to_ids("<|im_end|>")
    return end if isinstance(end, int) and end != tok.unk_token_id else tok.eos_token_id


_LL: dict = {}


def _llgrammar(tool, tok, vocab, end) -> LLGrammar:
    key = (tool, id(tok), vocab, end)
    if key not in _LL:  # the tokenizer is kept with its grammar, so its id is never reused meanwhile
        _LL[key] = (tok, LLGrammar(tool, tok, vocab, end))
    return _LL[key][1]


def json_text(template, tokens) -> str:
    """The text of a constrained reply under this template."""
    tok, end = getattr(template, "tok", None), end_token(template)
    if tok is None:
        base = template.vocab - 256
        return "".join(chr(t - base) for t in tokens if t != end and t >= base)
    return tok.decode([t for t in tokens if t != end])
