"""Tools: a name, an argument schema, and whether calling it changes the world.

A tool call is decoded by the model as JSON arguments under the tool's schema
(`unsee.model.grammar`). A read-only tool runs inside the transition and its result is
prefilled; a consequential one becomes a pending plan, committed at the start of the next
transition, and its committed calls are side effects no replay may fire again (A3).

The environment is a key → value map. A tool's key is its `key` argument where the schema
has one, else its canonical arguments. A read-only tool returns the value at its key; a
consequential tool writes its `value` argument (or, without one, its arguments) there.
`lookup` and `send` are the two tools every session has.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property

from unsee.model.grammar import JsonSchema, SchemaError, canonical


@dataclass(frozen=True)
class Tool:
    """`schema` is the canonical JSON text of the argument schema (a frozen value)."""

    name: str
    schema: str
    consequential: bool = False
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise SchemaError(f"tool name {self.name!r} must be an identifier (letters, digits, _)")
        self.arguments  # compile now: a bad schema is refused where the tool is declared

    @staticmethod
    def of(name: str, schema: dict, consequential: bool = False, description: str = "") -> "Tool":
        return Tool(name, canonical(schema), consequential, description)

    @cached_property
    def arguments(self) -> JsonSchema:
        return JsonSchema(json.loads(self.schema))

    def call_room(self) -> int:
        """Tokens a call may need for its longest arguments with the end token (one token per
        character at worst): a `call_tokens` below it may cut a call."""
        return self.arguments.longest() + 1

    def key(self, args: dict):
        return args["key"] if "key" in args else canonical(args)

    def to_json(self) -> dict:
        return {"name": self.name, "description": self.description, "parameters": json.loads(self.schema),
                "consequential": self.consequential}

    @staticmethod
    def from_json(d: dict) -> "Tool":
        if not isinstance(d, dict) or not isinstance(d.get("parameters"), dict):
            raise SchemaError(f"a tool needs a name and a JSON-schema object as parameters, got {d!r}")
        return Tool.of(d.get("name"), d["parameters"], bool(d.get("consequential", False)), d.get("description", ""))


def builtin_tools(n_keys: int) -> tuple[Tool, ...]:
    """`lookup(key)` reads the environment; `send(key, value)` writes it (a side effect)."""
    key = {"type": "integer", "minimum": 0, "maximum": n_keys - 1}
    return (Tool.of("lookup", {"type": "object", "properties": {"key": key}, "required": ["key"]},
                    description="Read the value stored under a key."),
            Tool.of("send", {"type": "object", "properties": {"key": key, "value": {"type": "string", "maxLength": 24}},
                             "required": ["key", "value"]},
                    consequential=True, description="Send a value to be stored under a key."))


BUILTIN = tuple(t.name for t in builtin_tools(1))

# The consequential tool of the shipping scenario the demo, the audits and the organisms share.
SHIP_GIFT = Tool.of("ship_gift", {"type": "object", "properties": {"address": {"type": "string", "maxLength": 48}}},
                    consequential=True, description="Ship the order to a postal address.")


def run_read_only(tool: Tool, args: dict | None, env: dict) -> str:
    """A read-only tool's result text, from the environment alone."""
    if args is None:
        return f"{tool.name} error: the arguments were not valid JSON for its schema"
    k = tool.key(args)
    if tool.name == "lookup":
        return f"lookup key {k} value {env.get(k, 0)}"
    return f"{tool.name} {canonical(args)} returned {canonical(env.get(k))}"


def commit(tool: Tool, args: dict, env: dict) -> str:
    """Apply a consequential call to the environment; returns the result text the agent reads."""
    k = tool.key(args)
    env[k] = args.get("value", canonical(args))
    if tool.name == "send":
        return f"send key {k} value {env[k]}"
    return f"{tool.name} {canonical(args)} done"
