"""Hypothesis strategies for sessions, targets and checkpoint policies.

A *program* is a plain list of operations, so a shrunk failure is a value that can be
printed, stored as JSON and replayed:

    ("obs", Observation)         one transition
    ("forget", Forget)           forget some of the targets present in the log

Targets are the sources "z1".."z3"; every other part gets a fresh benign source id. Every
choice shrinks towards the plain case (no compaction, no target, B7 at the latest
checkpoint), so a shrunk trace shows only what the failure needs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import strategies as st

from unsee.model.replay import POLICIES
from unsee.model.state import Observation, Part, TOOLS

TARGETS = ("z1", "z2", "z3")
WORDS = ("alice", "lives", "at", "12", "elm", "street", "iban", "DE89", "prefers", "acme",
         "send", "report", "meeting", "friday", "the", "budget", "is", "tight", "ok", "thanks")

policies = st.sampled_from(POLICIES)
texts = st.lists(st.sampled_from(WORDS), min_size=0, max_size=5).map(" ".join)


@st.composite
def observations(draw, index: int = 0) -> Observation:
    """One observation of up to three parts. A part is a target's one time in four, a later
    part may repeat an earlier part's text under its own source (the same text under two
    sources), and a target's part may come with a span that stands `instead_of` it, whose
    own source is benign or another target (a target inside an `instead_of` part)."""
    kind = draw(st.sampled_from(("user", "user", "memory", "tool", "system")))
    n_parts = draw(st.integers(1, 3))
    parts: list[Part] = []
    for k in range(n_parts):
        src = draw(st.sampled_from(TARGETS)) if draw(st.integers(0, 3)) == 3 else f"s{index}.{k}"
        text = parts[-1].text if parts and draw(st.integers(0, 4)) == 4 else draw(texts)
        parts.append(Part(src, text))
        if src in TARGETS and draw(st.booleans()):  # a value the target changed: clean text only without it
            alt = draw(st.sampled_from((f"s{index}.{k}.alt",) + tuple(z for z in TARGETS if z != src)))
            parts.append(Part(alt, draw(texts), instead_of=src))
    reply = draw(st.integers(0, 3))
    tool = draw(st.sampled_from((None, None) + TOOLS))
    compact = draw(st.integers(0, 7)) == 7
    return Observation(kind, tuple(parts), reply, tool, compact)


@dataclass(frozen=True)
class Forget:
    """One forget request. `picks`: which of the targets present in the log (k mod how many);
    `method`: "B7" or "B5"; `coarser`: with B7, force the checkpoint, the k-th (mod) of the
    boundaries before τ (None: the runtime's own choice, the latest)."""

    picks: tuple[int, ...] = (0,)
    method: str = "B7"
    coarser: int | None = None


forgets = st.builds(
    Forget,
    picks=st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True).map(tuple),
    method=st.integers(0, 4).map(lambda k: "B5" if k == 4 else "B7"),
    coarser=st.none() | st.integers(0, 7),
)


@st.composite
def programs(draw, max_ops: int = 10, max_steps: int = 40) -> list[tuple]:
    """A session with forget requests interleaved; at least one target enters, often two at
    different steps. One program in five is long: up to `max_steps` observations."""
    long = max_steps > max_ops and draw(st.integers(0, 4)) == 4
    n = draw(st.integers(max_ops + 1, max_steps)) if long else draw(st.integers(1, max_ops))
    ops: list[tuple] = []
    for i in range(n):
        if i > 0 and draw(st.integers(0, 4)) == 4:
            ops.append(("forget", draw(forgets)))
        else:
            ops.append(("obs", draw(observations(index=i))))
    # Make sure something is there to forget: inject a target at a drawn position, and often a
    # second one elsewhere (a forget of both then has two different τ)
    first = draw(st.sampled_from(TARGETS))
    injected = [first] + ([t for t in TARGETS if t != first][:1] if draw(st.booleans()) else [])
    at = []
    for z in injected:
        pos = draw(st.integers(0, len(ops)))
        ops.insert(pos, ("obs", Observation("user", (Part(z, draw(texts)),), reply=draw(st.integers(0, 3)))))
        at = [p + (p >= pos) for p in at] + [pos]
    ops.append(("forget", draw(forgets)))
    # Now and then a target's observation, or the one 1 or 2 before it, asks for the consequential
    # tool (a call planned there commits at τ+1, τ or τ−1, one transition later: the boundaries of
    # the compensation rule); or the one before it compacts; or holds a part of the target standing
    # instead of its own first part (a value the target changed, which F does not read: a forget
    # must drop it from the log it keeps before τ). Drawn last; 0 shrinks to none of them.
    for pos, z in zip(at, injected):
        k = draw(st.integers(0, 11))
        back = {5: 0, 6: 1, 7: 2, 8: 1, 9: 1, 10: 1, 11: 2}.get(k)
        if back is None or pos - back < 0 or ops[pos - back][0] != "obs":
            continue
        o = ops[pos - back][1]
        if k == 8:
            o = replace(o, compact=True)
        elif k >= 9:
            o = replace(o, parts=o.parts + (Part(z, ops[pos][1].parts[0].text, instead_of=o.parts[0].source),))
        else:
            o = replace(o, tool="send")
        ops[pos - back] = ("obs", o)
    return ops


configs = st.builds(
    dict,
    policy=policies,
    sampling=st.booleans(),
    seed=st.integers(0, 2**16),
)


def observation_code(o: Observation) -> str:
    """A Python expression that rebuilds `o`, showing only the fields that differ from the defaults."""
    parts = ", ".join(f"Part({p.source!r}, {p.text!r}" + (f", instead_of={p.instead_of!r})" if p.instead_of else ")")
                      for p in o.parts)
    extra = "".join(f", {k}={v!r}" for k, v in (("reply", o.reply), ("tool", o.tool), ("compact", o.compact))
                    if v not in (0, None, False))
    return f"Observation({o.kind!r}, ({parts},){extra})"


def format_program(program, config=None) -> list[str]:
    """A short listing of a program as drawn (the kit reports the runnable trace it executed)."""
    lines = [f"config {config}"] if config else []
    for op, arg in program:
        if op == "obs":
            lines.append(f"step({observation_code(arg)})")
        else:
            lines.append(f"forget({arg})")
    return lines
