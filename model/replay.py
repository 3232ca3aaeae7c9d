"""The recorded runtime and Algorithm 1 (Provenance-Guided Selective Replay), lines 5–10.

A `Session` is what the operator of Corollary 1 may read: the observation stream, the
stored real trajectory R_0..R_T, the provenance graph (inside each state), the
metadata-only checkpoints and the environment snapshots; plus the *world*: the side
effects that actually fired outside the runtime, which no replay may fire again.

Forget operators take a session and target sources and return (new session, receipt). The plan
(lines 1–4) is `unsee.model.plan.plan_forget`; every invocation of F (line 9) goes through the
session's transition, `step` with the session's model unless an engine hands its own, and the
receipt's `transitions` is the number of those calls, not a formula.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from unsee.model import lm
from unsee.model.errors import UnseeError
from unsee.model.plan import Checkpoint, ForgetPlan, compensation, plan_forget
from unsee.model.receipt import Effects, Receipt, Work, make_receipt
from unsee.model.state import Config, LedgerEntry, Observation, State, initial_state, layer_digests, step

POLICIES = ("every", "events", "start")

Transition = Callable[[State, Observation], State]  # R_t = F(R_{t-1}, o_t; θ), θ fixed


@dataclass(frozen=True)
class Session:
    config: Config
    policy: str
    observations: tuple[Observation, ...] = ()
    states: tuple[State, ...] = ()  # R_0..R_T
    checkpoints: tuple[Checkpoint, ...] = ()
    snapshots: tuple[tuple[str, tuple], ...] = ()  # env snapshot id → env items
    world: tuple[LedgerEntry, ...] = ()  # side effects that fired in the real world
    forgotten: frozenset[str] = frozenset()
    lm: lm.LM = field(default=lm.REFERENCE, compare=False, repr=False)  # θ: the model F runs

    @property
    def T(self) -> int:
        return len(self.observations)

    @property
    def state(self) -> State:
        return self.states[-1]

    def transition(self) -> Transition:
        """F with this session's θ: `step(R, o, lm)`."""
        return lambda r, o: step(r, o, self.lm)


def new_session(config: Config = Config(), policy: str = "every", model=lm.REFERENCE) -> Session:
    if policy not in POLICIES:
        raise ValueError(f"checkpoint policy {policy!r} is not one of {POLICIES}")
    r0 = initial_state(config, model)
    s = Session(config, policy, states=(r0,), lm=model)
    return _checkpoint(s, r0, 0)


def env_snapshot_id(env: tuple) -> str:
    return "env-" + hashlib.sha256(repr(env).encode()).hexdigest()[:12]


def _checkpoint(s: Session, r: State, boundary: int) -> Session:
    sid = env_snapshot_id(r.env)
    snaps = s.snapshots if any(k == sid for k, _ in s.snapshots) else s.snapshots + ((sid, r.env),)
    c = Checkpoint(boundary, len(r.tokens), "kv:session", sid, tuple(b.artifact for b in r.blocks))
    return replace(s, checkpoints=s.checkpoints + (c,), snapshots=snaps)


def live_checkpoint(s: Session) -> Checkpoint:
    """R_T itself as a checkpoint (not registered): where an operator that edits the live state in
    place, without replaying, says it spliced."""
    r = s.state
    return Checkpoint(s.T, len(r.tokens), "kv:session", env_snapshot_id(r.env), tuple(b.artifact for b in r.blocks))


def wants_checkpoint(policy: str, state: State, obs: Observation) -> bool:
    """Checkpoint the boundary before `obs`? 'events': before memory injections,
    consequential tool commits and compactions; 'every': every turn boundary."""
    if policy == "every":
        return True
    if policy == "events":
        return obs.kind == "memory" or bool(state.plan) or obs.compact
    return False


def append(s: Session, obs: Observation, transition: Transition | None = None,
           fire: bool = True) -> tuple[Session, tuple[LedgerEntry, ...]]:
    """Run one transition on the live session; returns the new side effects it committed.
    `transition`: F as an engine runs it (the same R_t, with its own bookkeeping); the session's
    `step` by default."""
    r = s.state
    if s.checkpoints[-1].boundary != s.T and wants_checkpoint(s.policy, r, obs):
        s = _checkpoint(s, r, s.T)
    r2 = (transition or s.transition())(r, obs)
    effects = r2.ledger[len(r.ledger):]
    s = replace(s, observations=s.observations + (obs,), states=s.states + (r2,))
    if fire:
        s = replace(s, world=s.world + effects)
    return s, effects


def run(observations, config: Config = Config(), policy: str = "every", model=lm.REFERENCE,
        transition: Transition | None = None) -> Session:
    s = new_session(config, policy, model)
    for o in observations:
        s, _ = append(s, o, transition)
    return s


# --- Algorithm 1, lines 5–10 -------------------------------------------------------------

def counterfactual_stream(observations, sources) -> tuple[Observation, ...]:
    """o^{-z}: every observation with z's parts removed; empty observations stay transitions."""
    z = frozenset(sources)
    return tuple(o.without(z) for o in observations)


def restore(s: Session, c: Checkpoint) -> State:
    """Line 5: crop the cache to c's offset and load the environment snapshot.

    The cache is cropped when c's prompt manifest is still a prefix of the context; after a
    compaction rebuilt the cache, or in a new process, it is brought back from the stored
    trajectory (`LM.rebuild`: read from K/V pages where an engine keeps them, re-materialized from
    the recorded tokens otherwise); neither is a transition. The non-KV layers at the boundary
    are read from the stored trajectory R_boundary (route (a) of Corollary 1).
    """
    stored = s.states[c.boundary]
    live = s.state
    env = dict(s.snapshots)[c.env_snapshot]
    if s.lm.resident(live.kv) and tuple(b.artifact for b in live.blocks[: len(c.manifest)]) == c.manifest:
        tokens, kv = live.tokens[: c.token_offset], s.lm.crop(live.kv, c.token_offset)
    else:
        tokens = stored.tokens
        kv = s.lm.rebuild(tokens, stored.blocks)
    restored = replace(stored, tokens=tokens, kv=kv, env=env)
    if replace(restored, kv=None) != replace(stored, kv=None):
        raise UnseeError(f"checkpoint at boundary {c.boundary} does not restore R_{c.boundary}: the store is corrupt")
    if s.lm.kv_length(kv) != len(tokens):
        raise UnseeError(f"checkpoint at boundary {c.boundary} restored a cache of {s.lm.kv_length(kv)} tokens for a "
                         f"context of {len(tokens)}: the cache does not describe R_{c.boundary}")
    return restored


def sanitize(obs: Observation, sources) -> Observation:
    """Line 7: õ_t ← Sanitize(o_t, z): remove z, keep the rest verbatim (A2)."""
    return obs.without(frozenset(sources))


def replay_suffix(s: Session, start: State, boundary: int, sources,
                  transition: Transition | None = None) -> tuple[Session, Effects, tuple[Observation, ...]]:
    """Lines 6–10 on the live session from R_boundary: one invocation of F per replayed
    observation, no side effect fired; returns the new session, line 8's report and the
    sanitized observations fed to F."""
    kept = tuple(c for c in s.checkpoints if c.boundary <= boundary)
    # the prefix's log loses z's parts too: a part of z that F never read before τ (one standing
    # instead of another source) is still z's text, and the twin's log never held it
    t = replace(s, observations=counterfactual_stream(s.observations[:boundary], sources),
                states=s.states[:boundary] + (start,), checkpoints=kept)
    made: list[LedgerEntry] = []
    replayed = []
    for obs in s.observations[boundary:]:
        o = sanitize(obs, sources)  # line 7
        replayed.append(o)
        t, effects = append(t, o, transition, fire=False)  # line 9; line 8: nothing fires
        made += effects
    dedup, comp = compensation(s.world, made, boundary)  # line 8's report (A3)
    used = {c.env_snapshot for c in t.checkpoints}  # drop snapshots only the forgotten suffix referenced
    t = replace(t, world=s.world, forgotten=s.forgotten | frozenset(sources),
                snapshots=tuple(x for x in dict.fromkeys(s.snapshots + t.snapshots) if x[0] in used))
    return t, Effects(tuple(dedup), tuple(comp)), tuple(replayed)


def operator_receipt(method: str, plan: ForgetPlan, s: Session, new: Session, effects: Effects = Effects(),
                     replayed=(), t0: float | None = None) -> Receipt:
    """The receipt of an operator run on `s` that left `new`: one invocation of F per replayed
    observation, the digests of the state it left, the seconds since `t0`."""
    return make_receipt(method, plan, Work(transitions=len(replayed)), effects, layer_digests(new.state, s.lm),
                        0.0 if t0 is None else time.perf_counter() - t0, replayed)


def selective_replay(s: Session, sources, checkpoint: int | None = None, transition: Transition | None = None,
                     method: str = "B7") -> tuple[Session, Receipt]:
    """B7, Algorithm 1. `checkpoint` forces a coarser splice point c < τ (for ablations).
    `transition`: F as an engine runs it (an engine hands the recorded replies to F as drafts:
    the state is F's either way)."""
    t0 = time.perf_counter()
    plan = plan_forget(s, sources, checkpoint)  # lines 1–4
    start = restore(s, plan.checkpoint)  # line 5
    new, effects, replayed = replay_suffix(s, start, plan.boundary, plan.sources, transition)  # lines 6–10
    return new, operator_receipt(method, plan, s, new, effects, replayed, t0)


def full_reset(s: Session, sources, transition: Transition | None = None, method: str = "B5") -> tuple[Session, Receipt]:
    """B5: re-run from R_init over o^{-z}: T invocations of F, nothing carried over. (B5′, a full
    reset that reuses a prefix cache, is an engine's: the same F, the same bits.)"""
    t0 = time.perf_counter()
    plan = plan_forget(s, sources, reset=True)
    start = replace(s.states[0], kv=s.lm.empty())  # a fresh R_init
    new, effects, replayed = replay_suffix(s, start, 0, plan.sources, transition)
    return new, operator_receipt(method, plan, s, new, effects, replayed, t0)
