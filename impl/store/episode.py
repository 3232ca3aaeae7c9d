"""Episode files: one JSON object per line, one observation per line (T = number of lines).

    {"kind": "system"|"user"|"memory"|"tool", "source": "<id>", "text": "...",
     "reply": <max new tokens, optional>, "tool": "<tool name>" (optional),
     "compact": true|false (optional)}

"tool" asks the agent to call a tool: `lookup` and `send` always exist; a line

    {"tools": [{"name": "ship_gift", "description": "...", "consequential": true,
                "parameters": {"type": "object", "properties": {"address": {"type": "string"}}}}]}

(not an observation) declares more, each with the JSON schema its arguments are decoded under.

A line may give "parts": [{"source", "text"[, "instead_of"]}, ...] instead of source and
text, for an observation that mixes sources (a tool result with an injected span).

Every line is validated before anything runs; errors name the line and the reason.
"""

from __future__ import annotations

import json
from pathlib import Path

from unsee.model.errors import UnseeError
from unsee.model.grammar import SchemaError
from unsee.model.state import KINDS, Observation, Part
from unsee.model.tools import BUILTIN, Tool

KEYS = {"kind", "source", "text", "parts", "reply", "tool", "compact"}


class EpisodeError(UnseeError, ValueError):
    pass


def parse_line(n: int, d: dict, default_reply: int, tools=BUILTIN) -> Observation:
    extra = set(d) - KEYS
    if extra:
        raise EpisodeError(f"line {n}: unknown field(s) {sorted(extra)}; allowed: {sorted(KEYS)}")
    if d.get("kind") not in KINDS:
        raise EpisodeError(f"line {n}: kind must be one of {list(KINDS)}, got {d.get('kind')!r}")
    if "parts" in d:
        if "source" in d or "text" in d:
            raise EpisodeError(f"line {n}: give either parts or source and text, not both")
        raw = d["parts"]
        if not isinstance(raw, list) or not all(isinstance(p, dict) for p in raw):
            raise EpisodeError(f"line {n}: parts must be a list of objects with source and text")
    else:
        raw = [{"source": d.get("source"), "text": d.get("text")}]
    parts = []
    for p in raw:
        src, text, alt = p.get("source"), p.get("text"), p.get("instead_of")
        if not isinstance(src, str) or not src:
            raise EpisodeError(f"line {n}: source must be a non-empty string, got {src!r}")
        if not isinstance(text, str):
            raise EpisodeError(f"line {n}: text must be a string, got {text!r}")
        if alt is not None and not isinstance(alt, str):
            raise EpisodeError(f"line {n}: instead_of must be a source id, got {alt!r}")
        parts.append(Part(src, text, alt))
    reply = d.get("reply", default_reply if d["kind"] == "user" else 0)
    if not isinstance(reply, int) or isinstance(reply, bool) or reply < 0:
        raise EpisodeError(f"line {n}: reply must be a non-negative integer (tokens), got {reply!r}")
    tool = d.get("tool")
    if tool is not None and tool not in tools:
        raise EpisodeError(f"line {n}: tool must be one of {sorted(tools)} (declare others on a tools line), "
                           f"got {tool!r}")
    compact = d.get("compact", False)
    if not isinstance(compact, bool):
        raise EpisodeError(f"line {n}: compact must be true or false, got {compact!r}")
    return Observation(d["kind"], tuple(parts), reply, tool, compact)


def _json(n: int, line: str) -> dict:
    try:
        d = json.loads(line)
    except json.JSONDecodeError as e:
        raise EpisodeError(f"line {n}: not JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(d, dict):
        raise EpisodeError(f"line {n}: expected a JSON object, got {type(d).__name__}")
    return d


def _tools(n: int, d: dict) -> tuple[Tool, ...]:
    if set(d) != {"tools"} or not isinstance(d["tools"], list):
        raise EpisodeError(f"line {n}: a tools line is {{\"tools\": [...]}} and nothing else")
    out = []
    for t in d["tools"]:
        try:
            tool = Tool.from_json(t)
        except SchemaError as e:
            raise EpisodeError(f"line {n}: tool {t.get('name') if isinstance(t, dict) else t!r}: {e}") from None
        if tool.name in BUILTIN:
            raise EpisodeError(f"line {n}: {tool.name!r} is built in; give the tool another name")
        out.append(tool)
    return tuple(out)


def parse_episode(path: Path, default_reply: int = 8) -> tuple[list[Observation], tuple[Tool, ...]]:
    """The observations of an episode file and the tools it declares."""
    if not path.exists():
        raise EpisodeError(f"episode file {path} does not exist")
    rows = [(n, _json(n, line)) for n, line in enumerate(path.read_text().splitlines(), 1)]
    tools = tuple(t for n, d in rows if "tools" in d for t in _tools(n, d))
    names = set(BUILTIN) | {t.name for t in tools}
    if len(names) != len(BUILTIN) + len(tools):
        raise EpisodeError(f"{path}: a tool is declared twice")
    obs = [parse_line(n, d, default_reply, names) for n, d in rows if "tools" not in d]
    if not obs:
        raise EpisodeError(f"{path} is empty: an episode needs at least one observation")
    return obs, tools


def write_episode(path: Path, observations, tools=()) -> None:
    rows = [json.dumps({"tools": [t.to_json() for t in tools]})] if tools else []
    for o in observations:
        d = {"kind": o.kind}
        if len(o.parts) == 1 and o.parts[0].instead_of is None:
            d.update(source=o.parts[0].source, text=o.parts[0].text)
        else:
            d["parts"] = [{"source": p.source, "text": p.text, **({"instead_of": p.instead_of} if p.instead_of else {})}
                          for p in o.parts]
        d["reply"] = o.reply
        if o.tool:
            d["tool"] = o.tool
        if o.compact:
            d["compact"] = True
        rows.append(json.dumps(d))
    path.write_text("\n".join(rows) + "\n")
