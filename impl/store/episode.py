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

Every line is validated before anything runs; errors name the line and the reason. Inputs are
bounded before anything is allocated for them: a line is read at most MAX_LINE_CHARS characters
at a time, a reply may ask for at most MAX_REPLY tokens and an episode holds at most MAX_TURNS
observations (`read_episode`); once the model is known, `check_context` refuses an episode
whose context cannot fit the model's window. Source ids are NFC-normalized (`normalize_source`).
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from unsee.model.errors import UnseeError
from unsee.model.grammar import SchemaError
from unsee.model.state import KINDS, Observation, Part
from unsee.model.tools import BUILTIN, Tool

KEYS = {"kind", "source", "text", "parts", "reply", "tool", "compact"}

# The limits (docs/cli.md, "Episode files"), each checked before anything is allocated for it.
MAX_LINE_CHARS = 1 << 20  # characters of one line, its JSON framing included: a longer one is never held whole
MAX_REPLY = 1 << 16  # tokens a line may ask the model to decode (8x SmolLM2's whole window)
MAX_TURNS = 4096  # observations of one episode; `unsee run --max-turns` raises it
REFERENCE_WINDOW = 8192  # context tokens of a run on the reference model (it has no window of its own)


class EpisodeError(UnseeError, ValueError):
    pass


class EpisodeLimit(EpisodeError):
    """An episode over one of the limits: the message names the line, the number, the limit and
    what to do."""


def normalize_source(text: str) -> str:
    """A source id as unsee keeps it: Unicode NFC, so that ids that print alike (`café` written
    with one code point or with `e` and a combining accent) are one id. Episode files are read
    through it; `unsee forget --source` and `unsee show --source` read their ids through it too."""
    return unicodedata.normalize("NFC", text)


def _invisible(text: str) -> list[str]:
    """The characters of `text` that print as nothing (controls, format characters such as a
    zero-width space, line and paragraph separators), as U+XXXX."""
    return [f"U+{ord(c):04X}" for c in text if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]


def source_id(n: int, what: str, value) -> str:
    """A source id of line n (`what`: source or instead_of), NFC-normalized; refused when it is
    not a non-empty string, holds a character that prints as nothing, or has spaces around it:
    any of these makes two ids that print alike."""
    if not isinstance(value, str) or not value:
        raise EpisodeError(f"line {n}: {what} must be a non-empty string (a source id), got {value!r}")
    hidden = _invisible(value)
    if hidden:
        raise EpisodeError(f"line {n}: {what} {value!r} holds characters that print as nothing ({', '.join(hidden)}); "
                           "write the id without them")
    if value != value.strip():
        raise EpisodeError(f"line {n}: {what} {value!r} has spaces around it; write the id without them")
    return normalize_source(value)


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
        if not raw:
            raise EpisodeError(f"line {n}: parts is empty; give at least one part (source and text), or leave "
                               "the line out")
    else:
        raw = [{"source": d.get("source"), "text": d.get("text")}]
    parts = []
    for p in raw:
        extra = set(p) - {"source", "text", "instead_of"}
        if extra:
            raise EpisodeError(f"line {n}: unknown field(s) {sorted(extra)} in a part; allowed: "
                               "['instead_of', 'source', 'text']")
        src, text, alt = source_id(n, "source", p.get("source")), p.get("text"), p.get("instead_of")
        if not isinstance(text, str):
            raise EpisodeError(f"line {n}: text must be a string, got {text!r}")
        if alt is not None:
            alt = source_id(n, "instead_of", alt)
            if alt == src:
                raise EpisodeError(f"line {n}: part {src!r} stands instead_of its own source, so it is never "
                                   "read; name the source whose removal shows it")
        parts.append(Part(src, text, alt))
    reply = d.get("reply", default_reply if d["kind"] == "user" else 0)
    if not isinstance(reply, int) or isinstance(reply, bool) or reply < 0:
        raise EpisodeError(f"line {n}: reply must be a non-negative integer (tokens), got {reply!r}")
    if reply > MAX_REPLY:
        raise EpisodeLimit(f"line {n}: reply {reply} exceeds the limit of {MAX_REPLY} tokens a line may ask for; "
                           "lower reply (a longer answer is several user lines)")
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
    except RecursionError:
        raise EpisodeError(f"line {n}: JSON nested too deeply") from None
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


@dataclass(frozen=True)
class Episode:
    """An episode file read and checked: its observations, the tools it declares, and the line
    of the file each observation was on (for errors found later)."""

    observations: tuple[Observation, ...]
    tools: tuple[Tool, ...]
    lines: tuple[int, ...]


def _lines(path: Path, max_turns: int):
    """(line number, JSON object) of each line of `path`, read at most MAX_LINE_CHARS characters
    at a time (a longer line, or more than `max_turns` observations, is refused before the rest
    is read). A path that is not a readable file is refused in one line."""
    turns = 0
    n = 0
    try:
        if path.is_dir():
            raise EpisodeError(f"{path} is a directory; give the path of an episode file (one JSON observation "
                               "per line)")
        if not path.exists():
            raise EpisodeError(f"episode file {path} does not exist")
        with open(path, encoding="utf-8") as f:
            while True:
                line = f.readline(MAX_LINE_CHARS + 1)
                if not line:
                    return
                n += 1
                if len(line.rstrip("\n")) > MAX_LINE_CHARS:
                    raise EpisodeLimit(f"line {n} is longer than the limit of {MAX_LINE_CHARS} characters a line "
                                       "may take; split its text over several lines")
                d = _json(n, line)
                if "tools" not in d:
                    turns += 1
                    if turns > max_turns:
                        raise EpisodeLimit(f"line {n}: the episode has more than {max_turns} observations, the most "
                                           "a run takes; split it into several episodes, or raise the limit "
                                           "(unsee run --max-turns)")
                yield n, d
    except UnicodeDecodeError as e:
        raise EpisodeError(f"{path} is not UTF-8 text (at line {n + 1} or a line after it: {e.reason}); save the "
                           "episode as UTF-8") from None
    except OSError as e:
        raise EpisodeError(f"cannot read episode file {path}: {e.strerror or e}; give a readable file") from None


def read_episode(path: Path, default_reply: int = 8, max_turns: int = MAX_TURNS) -> Episode:
    """An episode file, every line checked (`parse_line`, the limits above) before anything runs;
    an `instead_of` must name a source that some part of the episode carries (a span that stands
    instead of nothing would never be read)."""
    path = Path(path)
    rows = list(_lines(path, max_turns))
    tools = tuple(t for n, d in rows if "tools" in d for t in _tools(n, d))
    names = set(BUILTIN) | {t.name for t in tools}
    if len(names) != len(BUILTIN) + len(tools):
        raise EpisodeError(f"{path}: a tool is declared twice")
    obs, lines = [], []
    for n, d in rows:
        if "tools" not in d:
            obs.append(parse_line(n, d, default_reply, names))
            lines.append(n)
    if not obs:
        raise EpisodeError(f"{path} is empty: an episode needs at least one observation")
    seen = {p.source for o in obs for p in o.visible}
    for n, o in zip(lines, obs):
        for p in o.parts:
            if p.instead_of is not None and p.instead_of not in seen:
                raise EpisodeError(f"line {n}: instead_of {p.instead_of!r} names no source of this episode (no part "
                                   "without instead_of carries it), so the span would never be read; name the source "
                                   "whose removal shows it")
    return Episode(tuple(obs), tools, tuple(lines))


def parse_episode(path: Path, default_reply: int = 8, max_turns: int = MAX_TURNS
                  ) -> tuple[list[Observation], tuple[Tool, ...]]:
    """The observations of an episode file and the tools it declares (`read_episode`)."""
    ep = read_episode(path, default_reply, max_turns)
    return list(ep.observations), ep.tools


def check_context(episode: Episode, encode, header, window: int, model: str, summary_tokens: int,
                  call_tokens: int, bos: int = 0, own: bool = True) -> None:
    """Refuse, naming the line, an episode whose context cannot fit `window` positions on `model`,
    before anything runs. `encode(kind, text)` and `header(purpose, tool)` are the model's (its
    chat template); `window`: the model's context window, `bos` the positions its BOS takes there;
    `own=False`: the window is unsee's limit on a model that has none (the reference model).

    The context is counted as F writes it (`unsee.model.state.step`): a block per visible part, a
    model turn's header and the most it may decode (reply tokens, `call_tokens` for a tool call,
    `summary_tokens` for a summary: the engine needs room for all of them before the forward), a
    compaction leaving the leading system blocks and the summary. What only the run knows is
    counted as nothing: a tool's result, and a call's arguments once it is made. The engine
    refuses a forward past the window when the run gets there (`unsee.impl.engine.lm.TorchLM`)."""
    limit = window - bos  # the positions the context may take
    if own:
        named = f"{model}'s context window of {window} tokens" + (f" ({limit} after its BOS)" if bos else "")
    else:
        named = f"the limit of {window} tokens unsee sets on {model}'s context (it has no window of its own)"
    ctx = prefix = 0  # context tokens; those of its leading system blocks (what a compaction keeps)
    leading = True  # every block so far is a system block
    for n, o in zip(episode.lines, episode.observations):
        before = ctx
        text = 0
        for p in o.visible:
            k = len(encode(o.kind, p.text))
            text += k
            if leading and o.kind == "system":
                prefix += k
            else:
                leading = False
        ctx += text

        def room(need: int, what: str | None) -> None:
            if need <= limit:
                return
            if text > limit:
                raise EpisodeLimit(f"line {n}: its text takes {text} tokens on {model}, more than {named}; shorten "
                                   "it, or split it over several lines with \"compact\": true between them")
            if o.reply and o.reply + len(header("reply", None)) > limit:
                raise EpisodeLimit(f"line {n}: reply {o.reply} exceeds {named}; lower reply")
            raise EpisodeLimit(f"line {n}: the context would reach {need} tokens here ({before} before this line, "
                               f"{need - before} for its text{' and ' + what if what else ''}), more than {named}; "
                               "add \"compact\": true to an earlier line (a compaction keeps the system lines and a "
                               "summary), or shorten the text or the replies")

        room(ctx, None)
        if o.reply:
            ctx += len(header("reply", None)) + o.reply
            leading = False
            room(ctx, f"a {o.reply}-token reply")
        if o.tool is not None:
            head = len(header("plan", o.tool))
            room(ctx + head + call_tokens, f"a {o.tool} call of up to {call_tokens} tokens (--call-tokens)")
            ctx += head
            leading = False
        if o.compact:
            room(ctx + len(header("summary", None)) + summary_tokens, f"a {summary_tokens}-token summary")
            ctx = prefix + summary_tokens
            leading = False


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
