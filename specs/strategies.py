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


# --- placements reached by construction ------------------------------------------------------------
#
# Where the statements' rules fall relative to τ, c* and T, each a dimension of a forget's placement:
#   Theorem 1 / Corollary 1 (the splice): c* = τ−1 (the runtime's own latest checkpoint), c* < τ−1
#     because the policy keeps none at τ−1 (its own choice), c* < τ−1 forced (`checkpoint=`), R_0 (B5);
#   Lemma 1 (the shared prefix) and Corollary 1's count: τ < T (a suffix replayed, checkpoints kept
#     after τ) or τ = T;
#   Lemma 2 (the certifiable boundary), where the state's layout changes: a compaction in the
#     transition right before τ (R_{τ−1} holds it), one in the replayed suffix (after τ), or none;
#   A3 (side effects at the boundary): a consequential call committed at τ−1 (kept in the prefix), at
#     τ (planned before τ, committed by the first replayed transition), at τ+1, or none.
# Their product, less what cannot exist (a call at τ+1 or a compaction after τ when τ = T), is a set
# of coverage targets; one program per target (`directed_programs`) runs in every kit run before the
# random ones, so each combination is reached whatever the seed; two more reach the targets of the
# forget history (a forget after another, a target re-entering, z1 then z2 then z1, several τ) and of
# the parts (several parts of one observation, a text under two sources, an instead_of part).

SPLICES = ("c*=tau-1", "policy lacks tau-1", "c* forced coarser", "reset (B5)")
ENDS = ("tau<T", "tau=T")
COMPACTIONS = ("no compaction", "compaction right before tau", "compaction after tau")
EFFECTS = ("no call", "call committed at tau-1", "call committed at tau", "call committed at tau+1")


def placement_name(splice: str, end: str, compaction: str, effect: str) -> str:
    return f"{splice} · {end} · {compaction} · {effect}"


def placements() -> list[tuple[str, str, str, str]]:
    return [(s, e, c, f) for s in SPLICES for e in ENDS for c in COMPACTIONS for f in EFFECTS
            if not (e == "tau=T" and (f == "call committed at tau+1" or c == "compaction after tau"))]


TAU = 4  # the target's transition in a directed program: room for a call planned two transitions before it


def directed_program(splice: str, end: str, compaction: str, effect: str) -> tuple[dict, list[tuple]]:
    """(config, program): a session that places one forget of z1 as named. The config's policy keeps
    a checkpoint at every boundary, or at the session's start only ("policy lacks tau-1")."""
    T = TAU + 2 if end == "tau<T" else TAU
    obs = []
    for t in range(1, T + 1):
        parts = (Part("z1", "alice lives at 12 elm street"),) if t == TAU else (Part(f"s{t}", f"the budget {t} is tight"),)
        obs.append(Observation("user", parts, reply=2))
    plan_at = {"call committed at tau-1": TAU - 2, "call committed at tau": TAU - 1, "call committed at tau+1": TAU}
    if effect in plan_at:  # a call planned in transition t commits in t + 1
        k = plan_at[effect] - 1
        obs[k] = replace(obs[k], tool="send")
    if compaction == "compaction right before tau":
        obs[TAU - 2] = replace(obs[TAU - 2], compact=True)
    elif compaction == "compaction after tau":
        obs[TAU] = replace(obs[TAU], compact=True)
    forget = Forget((0,), "B5" if splice == "reset (B5)" else "B7", 0 if splice == "c* forced coarser" else None)
    policy = "start" if splice == "policy lacks tau-1" else "every"
    return {"policy": policy, "sampling": False, "seed": 0}, [("obs", o) for o in obs] + [("forget", forget)]


def _o(*parts) -> tuple:
    return ("obs", Observation("user", tuple(Part(*p) for p in parts), reply=1))


# The other coverage targets (the forget history's shapes and the parts' shapes), each reached by one
# of two programs. A forget's picks index the targets present in the log, in TARGETS order.
HISTORY_PROGRAM = (
    _o(("s1", "the budget")),
    _o(("z1", "alice lives"), ("z1", "at 12 elm"), ("s2", "alice lives")),  # several parts; its text under s2 too
    _o(("z2", "iban DE89")),
    ("forget", Forget((0, 1))),  # z1 and z2: two τ
    _o(("z1", "alice again")),
    ("forget", Forget((0,))),  # z1 again: after an earlier forget, re-entering after its forget
    _o(("z2", "iban again")),
    ("forget", Forget((0,))),  # z2
    _o(("z1", "alice thrice")),
    ("forget", Forget((0,))),  # z1, then z2, then z1 again
)
INSTEAD_OF_PROGRAM = (
    _o(("s1", "hi")),
    _o(("z1", "alice"), ("z2", "bob", "z1")),  # z2's part stands instead of z1's
    _o(("z2", "bob visible")),
    ("forget", Forget((1,))),  # z2: a target inside an instead_of part
)


# And the two shapes the checkpoint set depends on: a long session whose target enters early (a runtime
# that keeps few checkpoints must still splice before τ), and the "events" policy's promised checkpoint
# before a compaction.
LONG_PROGRAM = ((_o(("s1", "hi")), _o(("z1", "alice lives")))
                + tuple(_o((f"s{t}", f"the budget {t}")) for t in range(3, 17)) + (("forget", Forget((0,))),))
EVENTS_PROGRAM = (_o(("s1", "hi")), _o(("s2", "the budget")),
                  ("obs", Observation("user", (Part("s3", "is tight"),), reply=1, compact=True)),
                  _o(("z1", "alice lives")), _o(("s5", "thanks")), ("forget", Forget((0,))))


def directed_programs() -> list[tuple[dict, list[tuple]]]:
    every = {"policy": "every", "sampling": False, "seed": 0}
    return [directed_program(*p) for p in placements()] + [
        (every, HISTORY_PROGRAM), (every, INSTEAD_OF_PROGRAM), (every, LONG_PROGRAM),
        ({"policy": "events", "sampling": False, "seed": 0}, EVENTS_PROGRAM)]


def program_json(program) -> list:
    """A program as JSON: [op, its fields] per operation (`program_of` reads it back)."""
    from dataclasses import asdict

    return [[op, asdict(arg)] for op, arg in program]


def program_of(doc) -> list:
    out = []
    for op, arg in doc:
        if op == "obs":
            out.append(("obs", Observation(arg["kind"], tuple(Part(**p) for p in arg["parts"]), arg["reply"],
                                           arg["tool"], arg["compact"])))
        else:
            out.append(("forget", Forget(tuple(arg["picks"]), arg["method"], arg["coarser"])))
    return out
