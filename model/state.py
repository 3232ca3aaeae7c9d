"""The runtime state R_t, the observation o_t, and the transition F of Eq. (1).

    R_t = F(R_{t-1}, o_t; θ),  t = 1..T,  R_0 = R_init

Everything here is an immutable value and `step` is a pure function: the same (R, o)
always gives the same R' (with a seeded or greedy sampler, assumption A1).

One transition, in order:
  1. commit the pending consequential tool calls planned by the previous transition;
  2. one prompt block per observation part (memory parts are also written to the
     plaintext memory store);
  3. decode the model's reply (obs.reply tokens), if any: the prompt blocks since the last
     forward, the header and the reply are one forward (`Block`);
  4. if the observation asks for a tool: decode the call's JSON arguments under the tool's
     schema (what the model produced flows from context into actions); a read-only tool runs
     now and its result is prefilled; a consequential one becomes a pending plan;
  5. if obs.compact: decode a summary, rebuild the context as [leading system blocks,
     summary] and write the summary back to memory.
"""

from __future__ import annotations

import hashlib
import json
import operator
import unicodedata
from dataclasses import InitVar, dataclass, field, fields, replace
from typing import Any

from unsee.model import lm
from unsee.model.grammar import canonical
from unsee.model.tools import BUILTIN, Tool, builtin_tools, commit, run_read_only

KINDS = ("system", "user", "memory", "tool")
READ_ONLY_TOOLS = ("lookup",)
CONSEQUENTIAL_TOOLS = ("send",)
TOOLS = BUILTIN  # the tools every session has; a Config may declare more



@dataclass(frozen=True)
class Part:
    """One span of an observation, with the source id a forget request can name.

    instead_of: a span that exists only in the world without that target (a value the
    target changed, e.g. a file size that counts the injected bytes). It is hidden while
    the target is present and becomes an ordinary span once the target is removed.
    """

    source: str
    text: str
    instead_of: str | None = None

    def __post_init__(self) -> None:
        # ids that print alike are one id: `café` as one code point or as `e` and a combining accent
        if not _nfc(self.source) or (self.instead_of is not None and not _nfc(self.instead_of)):
            what, sid = ("source", self.source) if not _nfc(self.source) else ("instead_of", self.instead_of)
            raise ValueError(f"{what} id {sid!r} is not in Unicode NFC; write it as "
                             f"{unicodedata.normalize('NFC', sid)!r}, which prints the same")


def _nfc(sid) -> bool:
    return not isinstance(sid, str) or unicodedata.is_normalized("NFC", sid)


@dataclass(frozen=True)
class Observation:
    """o_t: an external observation (system prompt, user turn, memory injection, tool return).

    reply: how many tokens the model decodes after it (0 = no reply).
    tool: the name of a tool the observation asks the agent to call (`lookup`, `send`, or one
    the session's Config declares), or None.
    compact: compact the context at the end of this transition.
    """

    kind: str
    parts: tuple[Part, ...]
    reply: int = 0
    tool: str | None = None
    compact: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"observation kind {self.kind!r} is not one of {KINDS}")
        if self.tool is not None and not (isinstance(self.tool, str) and self.tool.isidentifier()):
            raise ValueError(f"tool {self.tool!r} is not a tool name")
        if self.reply < 0:
            raise ValueError(f"reply must be >= 0 tokens, got {self.reply}")

    @property
    def visible(self) -> tuple[Part, ...]:
        """The parts F reads: everything but counterfactual-only spans."""
        return tuple(p for p in self.parts if p.instead_of is None)

    @property
    def sources(self) -> frozenset[str]:
        return frozenset(p.source for p in self.visible)

    def without(self, sources: frozenset[str] | set[str]) -> "Observation":
        """o \\ {z}: the same observation with every part from `sources` removed (and the
        spans that stood instead of them shown). It stays an observation, and so a
        transition, even when nothing is left."""
        parts = tuple(replace(p, instead_of=None) if p.instead_of in sources else p
                      for p in self.parts if p.source not in sources)
        return replace(self, parts=parts)

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "parts": [[p.source, p.text] + ([p.instead_of] if p.instead_of else []) for p in self.parts],
            "reply": self.reply,
            "tool": self.tool,
            "compact": self.compact,
        }

    @staticmethod
    def from_json(d: dict) -> "Observation":
        return Observation(
            kind=d["kind"],
            parts=tuple(Part(*p) for p in d["parts"]),
            reply=d.get("reply", 0),
            tool=d.get("tool"),
            compact=d.get("compact", False),
        )


@dataclass(frozen=True)
class Artifact:
    """The provenance tuple (id, type, parents, source_ids, token_span, turn, committed).

    `delta` (given when it is made, not part of the tuple: never compared, copied or replaced) is
    how `source_ids` was made from the parents it was made with: (those parent artifacts, ids
    added, ids dropped), kept as `known_delta` so that digesting a graph need not compare source
    sets (see `artifact_delta`). `replace` makes an artifact without it."""

    id: str
    type: str
    parents: tuple[str, ...]
    source_ids: frozenset[str]
    token_span: tuple[int, int] | None
    turn: int
    committed: bool = False
    delta: InitVar[tuple | None] = None

    known_delta = None

    def __post_init__(self, delta) -> None:
        if delta is not None:
            object.__setattr__(self, "known_delta", delta)  # frozen: the one attribute set after __init__

    def __reduce__(self):
        """Copies and pickles are the provenance tuple alone: `known_delta` refers to the parent
        artifacts, and following them would copy the artifact's whole ancestry."""
        return Artifact, provenance(self)


provenance = operator.attrgetter(*(f.name for f in fields(Artifact) if f.compare))  # the provenance tuple, in order


@dataclass(frozen=True)
class Block:
    """A contiguous run of context tokens [start, end) produced by one artifact.

    prefill: the tokens of the block that are prompt (all of a prompt block; a model turn's
    header). joined: the block's rows were computed in one forward with the block after it.
    The canonical schedule (store format 7): a model turn is one forward of the prompt blocks
    its transition wrote since the last forward (the observation, a tool's result), its header
    and its reply, the reply the fixed point of that forward; those prompt blocks are `joined`.
    Any other prompt block (a system block, one no model turn follows) is a forward of its own.
    """

    artifact: str
    kind: str
    start: int
    end: int
    prefill: int
    joined: bool = False


def forward_groups(blocks) -> list[tuple[int, int]]:
    """The forwards of the canonical schedule over `blocks`, as [first, last] block indices: a run
    of joined blocks and the block after it."""
    out, first = [], 0
    for i, b in enumerate(blocks):
        if not b.joined:
            out.append((first, i))
            first = i + 1
    if first < len(blocks):  # a trailing joined block has no forward to join: it is its own
        out.append((first, len(blocks) - 1))
    return out


@dataclass(frozen=True)
class ToolCall:
    """A pending consequential call. args: the canonical JSON text of its arguments."""

    call_id: str
    tool: str
    args: str
    plan: str  # artifact id of the plan that produced it


@dataclass(frozen=True)
class LedgerEntry:
    """A committed side effect of a consequential tool. args: canonical JSON text."""

    call_id: str
    tool: str
    args: str
    turn: int


@dataclass(frozen=True)
class Config:
    """The scaffold's settings. seed=None with sampling=True breaks A1 on purpose.

    call_tokens: the most tokens a tool call's JSON arguments may take (a call cut off there is
    invalid: it fails, deterministically). tools: tools declared besides `lookup` and `send`."""

    sampling: bool = False
    seed: int | None = 0
    summary_tokens: int = 4
    call_tokens: int = 64
    n_keys: int = 4
    env: tuple[tuple[int, int], ...] = ((0, 11), (1, 22), (2, 33), (3, 44))
    tools: tuple[Tool, ...] = ()

    def to_json(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**d, "env": [list(kv) for kv in self.env], "tools": [t.to_json() for t in self.tools]}

    @staticmethod
    def from_json(d: dict) -> "Config":
        return Config(**{**d, "env": tuple(tuple(kv) for kv in d.get("env", Config.env)),
                         "tools": tuple(Tool.from_json(t) for t in d.get("tools", ()))})

    def tool(self, name: str) -> Tool:
        for t in builtin_tools(self.n_keys) + self.tools:
            if t.name == name:
                return t
        known = [t.name for t in builtin_tools(self.n_keys) + self.tools]
        raise KeyError(f"tool {name!r} is not declared; this session's tools are {known}")

    def calls_that_may_be_cut(self) -> list[str]:
        """One line per declared tool whose longest arguments, with the end token, may not fit in
        `call_tokens` (one token per character at worst): such a call is cut, and fails without running."""
        out = []
        for t in self.tools:
            need = t.call_room()
            if need > self.call_tokens:
                out.append(f"tool {t.name}: its longest arguments take {need - 1} characters and a call may "
                           f"take at most {self.call_tokens} tokens (call_tokens) with its end token; a call cut "
                           f"there is invalid and fails without running. Raise call_tokens to {need}, or "
                           "lower the schema's maxLength.")
        return out


@dataclass(frozen=True)
class State:
    """R_t. Every reconstructible layer the paper names is a field."""

    config: Config
    turn: int = 0
    tokens: tuple[int, ...] = ()  # the transcript in context: [n]
    kv: Any = ()  # the model's cache: the reference's prefix hashes [n], or a handle on a KV engine
    blocks: tuple[Block, ...] = ()
    memory: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (artifact id, text tokens)
    summary: tuple[int, ...] | None = None
    plan: tuple[ToolCall, ...] = ()  # pending, uncommitted consequential calls
    env: tuple[tuple[int, int], ...] = ()
    ledger: tuple[LedgerEntry, ...] = ()
    artifacts: tuple[Artifact, ...] = field(default=(), repr=False)
    outputs: tuple[tuple[int, ...], ...] = ()  # what the last transition decoded, in order (not a layer)


def initial_state(config: Config = Config(), model=lm.REFERENCE) -> State:
    """R_init."""
    return State(config=config, kv=model.empty(), env=env_items(dict(config.env)))


def env_items(env: dict) -> tuple:
    """The environment as a value: its items sorted by canonical key (keys may be ints or text)."""
    return tuple(sorted(env.items(), key=lambda kv: canonical(kv[0])))


class _Lookup:
    """id → artifact over R_{t-1}'s artifacts and those this transition adds. A transition reads
    the parents of what it makes (its fields, the last block, the plan it commits), which lie
    near the end of the graph, so a miss scans back from the end instead of indexing the whole
    graph at every transition."""

    __slots__ = ("old", "pos", "seen", "new")

    def __init__(self, artifacts) -> None:
        self.old, self.pos, self.seen, self.new = artifacts, len(artifacts), {}, {}

    def __getitem__(self, aid: str) -> Artifact:
        a = self.new.get(aid)
        if a is not None:
            return a
        while aid not in self.seen and self.pos > 0:
            self.pos -= 1
            x = self.old[self.pos]
            self.seen.setdefault(x.id, x)  # the last artifact of an id wins, as in a dict of them all
        return self.seen[aid]

    def __setitem__(self, aid: str, a: Artifact) -> None:
        self.new[aid] = a


class _Turn:
    """Accumulates one transition's outputs; `freeze` returns the new State."""

    def __init__(self, state: State, turn: int, model) -> None:
        self.lm = model
        self.s = state
        self.turn = turn
        self.tokens = list(state.tokens)
        self.kv = state.kv
        self.blocks = list(state.blocks)
        self.memory = list(state.memory)
        self.env = dict(state.env)
        self.ledger = list(state.ledger)
        self.artifacts = list(state.artifacts)
        self.by_id = _Lookup(state.artifacts)
        self.counter = 0
        self.outputs: list[tuple[int, ...]] = []
        self.inputs: tuple[str, ...] = ()
        self.pending = 0  # prompt blocks at the end of `blocks` not computed yet: the next model turn's

    def field(self, kind: str, part: Part) -> str:
        """A recorded observation field: an input, so it has no parents."""
        self.counter += 1
        aid = f"t{self.turn}.{self.counter}.{kind}"
        a = Artifact(aid, kind, (), frozenset({part.source}), None, self.turn, delta=((), (part.source,), ()))
        self.artifacts.append(a)
        self.by_id[aid] = a
        return aid

    def artifact(self, type_: str, parents: tuple[str, ...], span: tuple[int, int] | None = None,
                 committed: bool = False) -> str:
        """A derived artifact. The graph is the paper's conservative one: whatever a transition
        generates reads the whole state, so its parents include this turn's inputs (o_t's
        fields and the last block of R_{t-1})."""
        parents = tuple(dict.fromkeys(parents + self.inputs))
        self.counter += 1
        aid = f"t{self.turn}.{self.counter}.{type_}"
        src: set[str] = set()
        of = tuple(self.by_id[p] for p in parents)
        for p in of:
            src |= p.source_ids  # oracle source-ID propagation
        a = Artifact(aid, type_, parents, frozenset(src), span, self.turn, committed,
                     delta=(of, (), ()))  # the parents' union, by construction
        self.artifacts.append(a)
        self.by_id[aid] = a
        return aid

    def last_block(self) -> tuple[str, ...]:
        return (self.blocks[-1].artifact,) if self.blocks else ()

    def prefill(self, type_: str, kind: str, tokens: tuple[int, ...], parents: tuple[str, ...]) -> str:
        """A prompt block: its cache entries depend on everything before it. It is computed with
        the next model turn of this transition (`decode`), or alone (`flush`): a system block
        always alone (a compaction keeps it without the turn after it)."""
        start = len(self.tokens)
        aid = self.artifact(type_, parents + self.last_block(), span=(start, start + len(tokens)))
        self.tokens.extend(tokens)
        self.blocks.append(Block(aid, kind, start, len(self.tokens), len(tokens)))
        self.pending += 1
        if kind == "system":
            self.flush()
        return aid

    def flush(self) -> None:
        """Compute the pending prompt blocks, each as a forward of its own (no model turn follows)."""
        for blk in self.blocks[len(self.blocks) - self.pending:]:
            self.kv = self.lm.prefill(self.kv, self.tokens[blk.start:blk.end])
        self.pending = 0

    def join(self) -> list[int]:
        """The pending prompt blocks' tokens, marked joined to the model turn that computes them."""
        first = len(self.blocks) - self.pending
        joined = self.blocks[first:]
        self.blocks[first:] = [replace(b, joined=True) for b in joined]
        self.pending = 0
        return self.tokens[joined[0].start:joined[-1].end] if joined else []

    def decode(self, type_: str, n: int, salt: int, tool: Tool | None = None) -> tuple[str, tuple[int, ...]]:
        """The model's own tokens, one model turn of the LM: the chat template's header for an
        assistant turn, then n tokens, each the model's choice after the ones before; for a tool
        call, at most n tokens of JSON arguments under the tool's schema, the mask a function of
        the tokens before."""
        cfg = self.s.config
        draw = lm.draws(cfg.seed, self.turn, salt, n) if cfg.sampling else None
        start = len(self.tokens)
        head = self.lm.header(type_, None if tool is None else tool.name)
        prompt = tuple(self.join()) + tuple(head)  # the turn's forward: its prompt blocks, its header
        constraint = None if tool is None else self.lm.grammar(tool)
        out, self.kv = self.lm.decode(self.kv, n, draw, constraint=constraint, head=prompt)
        self.outputs.append(out)
        aid = self.artifact(type_, self.last_block(), span=(start, start + len(head) + len(out)))
        self.tokens.extend(head + out)
        self.blocks.append(Block(aid, "assistant", start, len(self.tokens), len(head)))
        return aid, out

    def freeze(self, **changes) -> State:
        return replace(
            self.s,
            turn=self.turn,
            tokens=tuple(self.tokens),
            kv=self.kv,
            blocks=tuple(self.blocks),
            memory=tuple(self.memory),
            env=env_items(self.env),
            ledger=tuple(self.ledger),
            artifacts=tuple(self.artifacts),
            outputs=tuple(self.outputs),
            **changes,
        )


def step(state: State, obs: Observation, model: lm.LM = lm.REFERENCE) -> State:
    """F(R_{t-1}, o_t; θ) → R_t (Eq. 1). `model` is θ: the reference LM unless a real one is given."""
    b = _Turn(state, state.turn + 1, model)
    fields = [b.field(obs.kind, part) for part in obs.visible]
    b.inputs = tuple(fields) + b.last_block()
    commit_pending(b, state.plan)
    for part, field_id in zip(obs.visible, fields):
        observe(b, obs.kind, part, field_id)
    if obs.reply:
        b.decode("reply", obs.reply, salt=0)
    plan: tuple[ToolCall, ...] = ()
    if obs.tool is not None:
        plan = call_tool(b, obs.tool)
    summary = state.summary
    if obs.compact:
        summary = compact(b)
    b.flush()  # prompt blocks no model turn of this transition computed
    return b.freeze(plan=plan, summary=summary)


def commit_pending(b: _Turn, plan: tuple[ToolCall, ...]) -> None:
    """Execute the consequential calls planned last transition; each is a side effect."""
    for call in plan:
        text = commit(b.s.config.tool(call.tool), json.loads(call.args), b.env)
        b.ledger.append(LedgerEntry(call.call_id, call.tool, call.args, b.turn))
        cid = b.artifact("tool_call", (call.plan,), committed=True)
        b.prefill("tool_result", "tool", b.lm.encode("tool", text), (cid,))


def observe(b: _Turn, kind: str, part: Part, field_id: str) -> None:
    """A field (the raw observation) → its prompt block; memory is also stored as a record."""
    toks = b.lm.encode(kind, part.text)
    if kind == "memory":
        rec = b.artifact("memory_record", (field_id,))
        b.memory.append((rec, toks))
    b.prefill("block", kind, toks, (field_id,))


def call_tool(b: _Turn, name: str) -> tuple[ToolCall, ...]:
    """Decode the call's JSON arguments; run a read-only tool now, or leave a consequential one
    pending. A call whose arguments were cut off at `call_tokens` fails here, with its error
    prefilled as the tool's result."""
    tool = b.s.config.tool(name)
    plan_id, out = b.decode("plan", b.s.config.call_tokens, salt=1, tool=tool)
    args = tool.arguments.validate(b.lm.json_text(out))
    call_id = f"call-t{b.turn}"
    if tool.consequential and args is not None:
        return (ToolCall(call_id, tool.name, canonical(args), plan_id),)
    cid = b.artifact("tool_call", (plan_id,))
    b.prefill("tool_result", "tool", b.lm.encode("tool", run_read_only(tool, args, b.env)), (cid,))
    return ()


def compact(b: _Turn) -> tuple[int, ...]:
    """Model-authored summary replaces older turns; the cache is rebuilt from the new context."""
    n = b.s.config.summary_tokens
    sid, summary = b.decode("summary", n, salt=2)
    keep = []
    for blk in b.blocks:
        if blk.kind != "system":
            break
        keep.append(blk)
    tokens = [t for blk in keep for t in b.tokens[blk.start:blk.end]]
    start = len(tokens)
    b.blocks = keep + [Block(sid, "summary", start, start + n, n)]
    b.tokens = tokens + list(summary)
    # rebuilt cache: the old one is not resident any more. An engine may keep the leading
    # system blocks' rows (same tokens at the same positions: same bits).
    b.kv = b.lm.rebuild(b.tokens, b.blocks)
    rec = b.artifact("memory_record", (sid,))  # summary write-back
    b.memory.append((rec, summary))
    return summary


def _h(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=repr).encode()).hexdigest()[:16]


def inherited_sources(parents, sources_of) -> frozenset:
    """The union of the parents' source sets (`sources_of`: artifact id → source ids; a parent
    an edit removed passes nothing on). The largest parent's set is shared, not copied, when
    the others add nothing to it: under oracle propagation the sets grow with the session."""
    sets = [sources_of[p] for p in parents if p in sources_of]
    if not sets:
        return frozenset()
    out = max(sets, key=len)
    for x in sets:
        if x is not out and not x <= out:
            out = out | x
    return out


def source_delta(a: Artifact, sources_of) -> tuple[list[str], list[str]]:
    """What `a`'s source ids add to and drop from its parents' union, each sorted: with the
    parents, this determines the source set, and it does not grow with the session."""
    inherited = inherited_sources(a.parents, sources_of)
    if a.source_ids is inherited or a.source_ids == inherited:
        return [], []
    return sorted(a.source_ids - inherited), sorted(inherited - a.source_ids)


def artifact_delta(a: Artifact, artifacts_of) -> tuple[list[str], list[str]]:
    """`source_delta` of `a` with `artifacts_of`: artifact id → the artifact. An artifact made
    by a transition or read back from a store knows its delta relative to the parent objects
    it was made or loaded with; while those are the very parents here, it holds (identical
    parents, identical sets) and no set is compared, so digesting a graph costs its size, not
    the size of its source sets (which grow with the session)."""
    known = a.known_delta
    if known is not None and len(known[0]) == len(a.parents) and all(
            artifacts_of.get(p) is q for p, q in zip(a.parents, known[0])):
        return known[1], known[2]
    return source_delta(a, _SourcesOf(artifacts_of))


class _SourcesOf:
    """artifact id → source ids, read through a map of artifacts."""

    __slots__ = ("artifacts",)

    def __init__(self, artifacts) -> None:
        self.artifacts = artifacts

    def __contains__(self, aid) -> bool:
        return aid in self.artifacts

    def __getitem__(self, aid) -> frozenset:
        return self.artifacts[aid].source_ids


def graph_digest(artifacts) -> str:
    """G_t's digest. Source ids are digested relative to the parents' union (what an artifact
    adds and drops): with the parents in the digest that determines every source set, and it
    stays linear in the session while the sets themselves grow with it."""
    by_id: dict[str, Artifact] = {}
    rows = []
    for a in artifacts:
        added, dropped = artifact_delta(a, by_id)
        by_id[a.id] = a
        rows.append((a.id, a.type, a.parents, added, dropped, a.token_span, a.turn, a.committed))
    return _h(rows)


def layer_digests(state: State, model=lm.REFERENCE) -> dict[str, str]:
    """One digest per layer of R, so that a mismatch names the layer that differs."""
    h = _h
    return {
        "turn": h(state.turn),
        "transcript": h([state.tokens, [(b.artifact, b.kind, b.start, b.end, b.prefill, b.joined)
                                         for b in state.blocks]]),
        "kv": model.kv_digest(state.kv),
        "memory": h(state.memory),
        "summary": h(state.summary),
        "plan": h([(c.call_id, c.tool, c.args, c.plan) for c in state.plan]),
        "environment": h(state.env),
        "ledger": h([(e.call_id, e.tool, e.args, e.turn) for e in state.ledger]),
        "graph": graph_digest(state.artifacts),
    }
