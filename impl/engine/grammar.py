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

The LangGraph chat model writes a model turn in its chat template's own form instead
(`call_grammar`, `text_grammar`): a tool call `name", "arguments": {…}}\n</tool_call>` after the
prefilled `<tool_call>\n{"name": "`, or a text answer, each ending with the end-of-turn token, and
`call_room` bounds the tokens a call can take.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from unsee.model.grammar import closed
from unsee.model.errors import UnseeError


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


class LarkGrammar:
    """A grammar in llguidance's Lark syntax over a Hugging Face tokenizer, ending with `end`."""

    def __init__(self, name: str, source: str, hf_tokenizer, vocab: int, end: int) -> None:
        import llguidance

        self.name, self.vocab, self.end = name, vocab, end
        self.tokenizer = _lltokenizer(hf_tokenizer, vocab, end)
        self.source = llguidance.LLMatcher.grammar_from_lark(source)
        self.matcher()  # a grammar llguidance refuses is refused here, not at the first token

    def matcher(self) -> LLMatcher:
        return LLMatcher(self)


# The JSON a chat template's call writes: the spacing of json.dumps (and of the template's example),
# no other whitespace, and the escapes \" \\ \b \f \n \r \t only (no \u), so each character of a
# string takes at most 4 bytes (`json_bound`).
JSON_STYLE = {"whitespace_flexible": False, "key_separator": ": ", "item_separator": ", ",
              "json_allowed_escapes": '"\\bfnrt'}
# A text answer: at least one non-space character, no special token (so `<|im_start|>` cannot open
# another turn) and no tool tag (`<tool_call>`, `</tool_response>`, …), so an answer is never the
# fragment of a call.
TEXT_LARK = 'start: TEXT\nTEXT: /(?s:\\s*[^\\s<].*)/ & ~/(?s:.*<\\/?tool.*)/\n'


def call_lark(tools) -> str:
    """The Lark grammar of a call after its opening (templates.CALL_OPEN): one of `tools` ((name,
    JSON schema of the arguments) pairs) by name, its arguments under its schema (every property
    required, no other), the closing `}\n</tool_call>`."""
    import json

    from unsee.impl.engine.templates import CALL_ARGUMENTS, CALL_CLOSE

    rules = [f"start: {' | '.join(f'call{i}' for i in range(len(tools)))}"]
    for i, (name, schema) in enumerate(tools):
        rules.append(f"call{i}: {json.dumps(name)} {json.dumps(CALL_ARGUMENTS)} args{i} {json.dumps(CALL_CLOSE)}")
        rules.append(f"args{i}: %json {json.dumps({**closed(schema), 'x-guidance': JSON_STYLE})}")
    return "\n".join(rules) + "\n"


def call_grammar(template, tools, vocab: int) -> LarkGrammar:
    """The constraint of a tool call in the chat template's form (see `call_lark`), over a model
    with its own tokenizer; it ends with the end-of-turn token."""
    source = call_lark(tools)
    return _lark("|".join(name for name, _ in tools), source, template.tok, vocab, end_token(template))


def text_grammar(template, vocab: int) -> LarkGrammar:
    """A text answer (TEXT_LARK) ending with the end-of-turn token, over a model with its own tokenizer."""
    return _lark("text", TEXT_LARK, template.tok, vocab, end_token(template))


class NoRepeatMatcher:
    def __init__(self, grammar: "NoRepeat") -> None:
        self.g, self.inner = grammar, grammar.inner.matcher()
        self.tokens: list[int] = []
        self.follows: dict[tuple, set] = {}  # each (n−1)-gram of the reply → the tokens that followed it

    def mask(self) -> torch.Tensor:
        allowed = self.inner.mask()
        n = self.g.n
        if n < 1 or len(self.tokens) < n - 1:
            return allowed
        seen = self.follows.get(tuple(self.tokens[len(self.tokens) - n + 1:]))
        if not seen:
            return allowed
        kept = allowed.clone()
        kept[sorted(seen)] = False
        return kept if bool(kept.any()) else allowed  # the grammar forces a repeat: it stands

    def consume(self, token: int) -> None:
        self.inner.consume(token)
        n = self.g.n
        self.tokens.append(int(token))
        if n >= 1 and len(self.tokens) >= n:
            self.follows.setdefault(tuple(self.tokens[len(self.tokens) - n:-1]), set()).add(int(token))


class NoRepeat:
    """`inner` where no n tokens of the reply repeat (transformers' no_repeat_ngram_size as a mask): a
    token that would end an n-gram the reply already holds is not allowed, unless the grammar allows
    nothing else. The mask is a function of the tokens before, as every constraint here."""

    def __init__(self, inner, n: int) -> None:
        self.inner, self.n, self.end, self.name = inner, n, inner.end, getattr(inner, "name", "")

    def matcher(self) -> NoRepeatMatcher:
        return NoRepeatMatcher(self)


_LARK: dict = {}


def _lark(name: str, source: str, tok, vocab: int, end: int) -> LarkGrammar:
    key = (source, id(tok), vocab, end)
    if key not in _LARK:  # kept with its tokenizer, whose id is then never reused
        _LARK[key] = (tok, LarkGrammar(name, source, tok, vocab, end))
    return _LARK[key][1]


def json_bound(schema) -> tuple[int, int]:
    """(bytes, open): the most bytes a document of `schema` takes as `call_lark` writes it (JSON_STYLE,
    every property present), leaving out the values the schema does not bound (a string with no
    maxLength, an integer without both minimum and maximum, a number, an array), and how many of
    those open values it has."""
    import json

    if not isinstance(schema, dict):
        return 0, 1
    if "enum" in schema:
        return max(max(len(json.dumps(v)), len(json.dumps(v, ensure_ascii=False).encode()))
                   for v in schema["enum"]), 0
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties") or {}
        size, opened = 2 + 2 * max(len(props) - 1, 0), 0  # braces, ", " between properties
        for k, sub in props.items():
            b, o = json_bound(sub)
            size, opened = size + len(json.dumps(k, ensure_ascii=False).encode()) + 2 + b, opened + o
        return size, opened
    if kind == "string" and isinstance(schema.get("maxLength"), int):
        return 2 + 4 * schema["maxLength"], 0  # quotes; a character is at most 4 bytes (UTF-8, or a 2-byte escape)
    if kind == "integer" and isinstance(schema.get("minimum"), int) and isinstance(schema.get("maximum"), int):
        return max(len(str(schema["minimum"])), len(str(schema["maximum"]))), 0
    if kind == "boolean":
        return 5, 0
    if kind == "null":
        return 4, 0
    return 0, 1


def call_room(name: str, schema, open_tokens: int) -> int:
    """The most tokens a call to tool `name` (arguments under `schema`) takes after the call's
    opening, the end-of-turn token included, where each open value (see `json_bound`) may take
    `open_tokens`. Every token the grammar allows writes at least one byte, so a bounded schema's
    bytes bound its tokens (no token of SmolLM2's or recall-tiny's vocabulary but a special one
    decodes to no bytes, and the grammar allows no special token inside a call): such a call
    always closes within its room."""
    from unsee.impl.engine.templates import CALL_ARGUMENTS, CALL_CLOSE

    size, opened = json_bound(closed(schema))
    return len(name.encode()) + len(CALL_ARGUMENTS) + size + len(CALL_CLOSE) + 1 + opened * open_tokens


def json_text(template, tokens) -> str:
    """The text of a constrained reply under this template."""
    tok, end = getattr(template, "tok", None), end_token(template)
    if tok is None:
        base = template.vocab - 256
        return "".join(chr(t - base) for t in tokens if t != end and t >= base)
    return tok.decode([t for t in tokens if t != end])
