"""Hypothesis strategies for sessions, targets and checkpoint policies.

A *program* is a plain list of operations, so a shrunk failure is a value that can be
printed, stored as JSON and replayed:

    ("obs", Observation)         one transition
    ("forget", (k, ...))         forget the k-th not-yet-forgotten target(s) in the log

Targets are the sources "z1".."z3"; every other part gets a fresh benign source id.
"""

from __future__ import annotations

from hypothesis import strategies as st

from unsee.model.session import POLICIES
from unsee.model.state import Observation, Part, TOOLS

TARGETS = ("z1", "z2", "z3")
WORDS = ("alice", "lives", "at", "12", "elm", "street", "iban", "DE89", "prefers", "acme",
         "send", "report", "meeting", "friday", "the", "budget", "is", "tight", "ok", "thanks")

policies = st.sampled_from(POLICIES)
texts = st.lists(st.sampled_from(WORDS), min_size=0, max_size=5).map(" ".join)


@st.composite
def observations(draw, index: int = 0) -> Observation:
    kind = draw(st.sampled_from(("user", "user", "memory", "tool", "system")))
    n_parts = draw(st.integers(1, 2))
    parts = []
    for k in range(n_parts):
        src = draw(st.sampled_from(TARGETS)) if draw(st.integers(0, 3)) == 0 else f"s{index}.{k}"
        parts.append(Part(src, draw(texts)))
        if src in TARGETS and draw(st.booleans()):  # a value the target changed: clean text only without it
            parts.append(Part(f"s{index}.{k}.alt", draw(texts), instead_of=src))
    reply = draw(st.integers(0, 3))
    tool = draw(st.sampled_from((None, None) + TOOLS))
    compact = draw(st.integers(0, 7)) == 0
    return Observation(kind, tuple(parts), reply, tool, compact)


@st.composite
def programs(draw, max_ops: int = 10) -> list[tuple]:
    """A session with forget requests interleaved; at least one target enters."""
    n = draw(st.integers(1, max_ops))
    ops: list[tuple] = []
    for i in range(n):
        if i > 0 and draw(st.integers(0, 4)) == 0:
            ops.append(("forget", tuple(draw(st.lists(st.integers(0, 2), min_size=1, max_size=2, unique=True)))))
        else:
            ops.append(("obs", draw(observations(index=i))))
    # Make sure something is there to forget: inject a target at a drawn position
    pos = draw(st.integers(0, len(ops)))
    ops.insert(pos, ("obs", Observation("user", (Part(draw(st.sampled_from(TARGETS)), draw(texts)),),
                                        reply=draw(st.integers(0, 3)))))
    ops.append(("forget", (0,)))
    return ops


configs = st.builds(
    dict,
    policy=policies,
    sampling=st.booleans(),
    seed=st.integers(0, 2**16),
)


def format_program(program, config=None) -> list[str]:
    """A short, copy-pasteable trace of a program."""
    lines = [f"config {config}"] if config else []
    for op, arg in program:
        if op == "obs":
            parts = ", ".join(f"Part({p.source!r}, {p.text!r}" + (f", instead_of={p.instead_of!r})" if p.instead_of else ")")
                              for p in arg.parts)
            extra = "".join(f", {k}={v!r}" for k, v in (("reply", arg.reply), ("tool", arg.tool), ("compact", arg.compact))
                            if v not in (0, None, False))
            lines.append(f"step(Observation({arg.kind!r}, ({parts},){extra}))")
        else:
            lines.append(f"forget(targets #{list(arg)})")
    return lines
