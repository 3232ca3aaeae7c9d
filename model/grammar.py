"""JSON arguments under a tool's JSON schema, as a character automaton.

A tool call's arguments are decoded as JSON text constrained by the tool's schema: at every
step the model chooses among the tokens that keep the text a prefix of some valid document, and
the end token only once it is complete. The constraint is a function of the tokens chosen so far,
so the reply stays the unique fixed point of the model's choices (each token is fixed by the
context and the tokens before it, the mask included).

The documents are canonical: the object's properties in the schema's order, every one present,
no whitespace. The subset of JSON Schema understood: `object` (properties, nested objects),
`string` (minLength, maxLength; printable ASCII without quote or backslash), `integer`
(minimum, maximum), `boolean` and `enum`. Anything else is refused with `SchemaError`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

STRING_CHARS = frozenset(chr(c) for c in range(0x20, 0x7F)) - {'"', "\\"}
DEFAULT_MAX_LENGTH = 32
DEFAULT_RANGE = (-10**9, 10**9)


class SchemaError(ValueError):
    """A tool schema outside the supported subset; the message names the field."""


def canonical(value) -> str:
    """The canonical JSON text of arguments: the identity two calls are compared by."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


@dataclass(frozen=True)
class _Lit:
    text: str


@dataclass(frozen=True)
class _Str:
    lo: int
    hi: int


@dataclass(frozen=True)
class _Int:
    lo: int
    hi: int


@dataclass(frozen=True)
class _Enum:
    texts: tuple[str, ...]


def _items(schema, path: str) -> list:
    if not isinstance(schema, dict):
        raise SchemaError(f"{path}: a schema must be a JSON object, got {type(schema).__name__}")
    if "enum" in schema:
        vals = schema["enum"]
        if not vals or not all(isinstance(v, (str, int, bool)) for v in vals):
            raise SchemaError(f"{path}: enum must list strings, integers or booleans")
        return [_Enum(tuple(json.dumps(v) for v in vals))]
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties") or {}
        if not isinstance(props, dict) or not props:
            raise SchemaError(f"{path}: an object needs at least one property")
        out: list = []
        for i, (name, sub) in enumerate(props.items()):
            out.append(_Lit(("{" if i == 0 else ",") + json.dumps(name) + ":"))
            out += _items(sub, f"{path}.{name}")
        out.append(_Lit("}"))
        return out
    if kind == "string":
        lo, hi = int(schema.get("minLength", 0)), int(schema.get("maxLength", DEFAULT_MAX_LENGTH))
        if not 0 <= lo <= hi:
            raise SchemaError(f"{path}: need 0 <= minLength <= maxLength, got {lo}, {hi}")
        return [_Str(lo, hi)]
    if kind == "integer":
        lo, hi = int(schema.get("minimum", DEFAULT_RANGE[0])), int(schema.get("maximum", DEFAULT_RANGE[1]))
        if lo > hi:
            raise SchemaError(f"{path}: minimum {lo} > maximum {hi}")
        return [_Int(lo, hi)]
    if kind == "boolean":
        return [_Enum(("true", "false"))]
    raise SchemaError(f"{path}: type {kind!r} is not supported (object, string, integer, boolean, enum)")


def _merged(items: list) -> tuple:
    out: list = []
    for it in items:
        if isinstance(it, _Lit) and out and isinstance(out[-1], _Lit):
            out[-1] = _Lit(out[-1].text + it.text)
        else:
            out.append(it)
    return tuple(out)


def _int_prefix(buf: str, lo: int, hi: int) -> bool:
    """Is `buf` a prefix of the decimal text of some integer in [lo, hi]?"""
    if buf in ("", "-"):
        return buf == "" or lo < 0
    neg = buf.startswith("-")
    digits = buf[1:] if neg else buf
    if not digits.isdigit() or (len(digits) > 1 and digits[0] == "0") or (neg and digits == "0"):
        return False
    p = int(digits)
    if neg:  # the values -[p·10^k, (p+1)·10^k − 1]
        lo, hi = -hi, -lo
    for k in range(0, 20):
        a, b = p * 10**k, (p + 1) * 10**k - 1
        if a > hi:
            return False
        if b >= lo and (k == 0 or p != 0):
            return True
    return False


def _int_done(buf: str, lo: int, hi: int) -> bool:
    try:
        v = int(buf)
    except ValueError:
        return False
    return str(v) == buf and lo <= v <= hi


def _prefix(item, buf: str) -> bool:
    if isinstance(item, _Lit):
        return item.text.startswith(buf)
    if isinstance(item, _Enum):
        return any(t.startswith(buf) for t in item.texts)
    if isinstance(item, _Int):
        return _int_prefix(buf, item.lo, item.hi)
    if not buf:
        return True
    if buf[0] != '"':
        return False
    body, closed = (buf[1:-1], True) if len(buf) > 1 and buf.endswith('"') else (buf[1:], False)
    return all(c in STRING_CHARS for c in body) and len(body) <= item.hi and (not closed or len(body) >= item.lo)


def _done(item, buf: str) -> bool:
    if isinstance(item, _Lit):
        return buf == item.text
    if isinstance(item, _Enum):
        return buf in item.texts
    if isinstance(item, _Int):
        return _int_done(buf, item.lo, item.hi)
    return len(buf) >= 2 and buf.endswith('"') and _prefix(item, buf)


def _firsts(item, buf: str) -> frozenset:
    """The characters that may follow `buf` inside `item`."""
    if isinstance(item, _Lit):
        return frozenset(item.text[len(buf):len(buf) + 1])
    if isinstance(item, _Enum):
        return frozenset(t[len(buf)] for t in item.texts if t.startswith(buf) and len(t) > len(buf))
    if isinstance(item, _Int):
        return frozenset(c for c in "-0123456789" if _int_prefix(buf + c, item.lo, item.hi))
    if not buf:
        return frozenset('"')
    if _done(item, buf) or (len(buf) > 1 and buf.endswith('"')):
        return frozenset()
    n = len(buf) - 1
    out = set()
    if n < item.hi:
        out |= STRING_CHARS
    if n >= item.lo:
        out.add('"')
    return frozenset(out)


def closed(schema: dict) -> dict:
    """The schema of the documents this module decodes: every object closed (no other properties)
    and every property required, as the canonical form has them. A grammar engine given this
    schema decodes the same language, up to spacing."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if out.get("type") == "object":
        props = {k: closed(v) for k, v in (out.get("properties") or {}).items()}
        out.update(properties=props, required=list(props), additionalProperties=False)
    return out


class JsonSchema:
    """A tool's argument schema compiled to a sequence of literal and value items."""

    def __init__(self, schema: dict) -> None:
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise SchemaError("a tool's argument schema must be a JSON object schema ({\"type\": \"object\", ...})")
        self.schema = schema
        self.items = _merged(_items(schema, "arguments"))

    def matcher(self) -> "Matcher":
        return Matcher(self)

    def longest(self) -> int:
        """Characters in the longest document of the schema (a byte-level grammar decodes one
        token per character; a tokenizer's grammar may pack several)."""
        def size(it) -> int:
            if isinstance(it, _Lit):
                return len(it.text)
            if isinstance(it, _Enum):
                return max(map(len, it.texts))
            if isinstance(it, _Int):
                return max(len(str(it.lo)), len(str(it.hi)))
            return it.hi + 2  # the quotes
        return sum(size(it) for it in self.items)

    def validate(self, text: str):
        """The arguments `text` encodes when they are JSON that conforms to the schema, else None.
        Conformance, not the canonical form: a grammar engine may space a document differently."""
        try:
            value = json.loads(text)
        except ValueError:
            return None
        return value if conforms(value, self.schema) else None


def conforms(value, schema: dict) -> bool:
    """`value` satisfies `schema` (the subset of JSON Schema this module reads)."""
    if "enum" in schema:
        return any(value == v and type(value) is type(v) for v in schema["enum"])
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties") or {}
        return (isinstance(value, dict) and set(value) <= set(props)
                and all(k in value for k in schema.get("required", ()))
                and all(conforms(v, props[k]) for k, v in value.items()))
    if kind == "string":
        return isinstance(value, str) and schema.get("minLength", 0) <= len(value) <= schema.get(
            "maxLength", DEFAULT_MAX_LENGTH)
    if kind == "integer":
        lo, hi = schema.get("minimum", DEFAULT_RANGE[0]), schema.get("maximum", DEFAULT_RANGE[1])
        return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi
    if kind == "boolean":
        return isinstance(value, bool)
    return False


class Matcher:
    """Where a document stands: the item being read and the text read of it."""

    def __init__(self, schema: JsonSchema) -> None:
        self.items = schema.items
        self.i = 0
        self.buf = ""
        self.text = ""

    def allowed(self) -> frozenset:
        """The characters that may come next."""
        if self.i >= len(self.items):
            return frozenset()
        item = self.items[self.i]
        out = set(_firsts(item, self.buf))
        if self.buf and _done(item, self.buf) and self.i + 1 < len(self.items):
            out |= _firsts(self.items[self.i + 1], "")
        return frozenset(out)

    def complete(self) -> bool:
        """The text read is a whole document: the end token is allowed (and nothing else may follow)."""
        return self.i == len(self.items) - 1 and _done(self.items[self.i], self.buf) and not self.allowed()

    def consume(self, c: str) -> None:
        item = self.items[self.i]
        if _prefix(item, self.buf + c):
            self.buf += c
        elif self.buf and _done(item, self.buf) and self.i + 1 < len(self.items) \
                and _prefix(self.items[self.i + 1], c):
            self.i, self.buf = self.i + 1, c
        else:
            raise ValueError(f"character {c!r} does not continue {self.text!r}")
        self.text += c
