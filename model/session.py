"""The recorded runtime and Algorithm 1 (Provenance-Guided Selective Replay).

A `Session` is what the operator of Corollary 1 may read: the observation stream, the
stored real trajectory R_0..R_T, the provenance graph (inside each state), the
metadata-only checkpoints and the environment snapshots; plus the *world*: the side
effects that actually fired outside the runtime, which no replay may fire again.

Forget operators take a session and target sources and return (new session, receipt).
Every invocation of F goes through `step` with a `Meter`, so the receipt's `transitions`
is a count of calls, not a formula.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field, replace

import networkx as nx

from unsee.model.state import (
    Config,
    LedgerEntry,
    Meter,
    Observation,
    State,
    initial_state,
    layer_digests,
    lm,
    step,
)

POLICIES = ("every", "events", "start")


class UnseeError(Exception):
    """Base of the typed errors the runtime raises; each message says what to do."""


class UnknownSource(UnseeError, KeyError):
    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


@dataclass(frozen=True)
class Checkpoint:
    """Metadata only (no tensors): where the state at `boundary` lives and how to restore it."""

    boundary: int  # R_boundary: the state after `boundary` transitions
    token_offset: int
    cache_handle: str
    env_snapshot: str
    manifest: tuple[str, ...]  # the block artifact ids in context, in order


@dataclass(frozen=True)
class Receipt:
    sources: tuple[str, ...]
    method: str
    tau: int
    T: int
    checkpoint: int | None
    transitions: int
    tokens_prefilled: int
    tokens_decoded: int
    tokens_rematerialized: int
    seconds: float
    digests: dict
    taint: tuple[str, ...] = ()
    compensation: tuple[dict, ...] = ()  # committed side effects the counterfactual would not make (A3)
    deduplicated: tuple[str, ...] = ()  # call ids replay recognised as already committed
    replayed: tuple[Observation, ...] = field(default=(), repr=False)  # the sanitized õ_t fed to F
    tokens_restored: int = 0  # R_{c} context rows read back from K/V pages (no compute)
    replies: int = 0  # model turns the replay produced
    replies_skipped: int = 0  # of which the recorded reply was F's: checked by one prefill, not decoded
    tokens_verified: int = 0  # reply tokens prefilled to check a draft or a decoded reply (their K/V)
    tokens_reused: int = 0  # B5′: prompt-block rows taken from its prefix cache (no compute)

    @property
    def tokens_computed(self) -> int:
        """Every token a forward computed: prompt blocks, decoding, verification and re-materializing."""
        return self.tokens_prefilled + self.tokens_decoded + self.tokens_verified + self.tokens_rematerialized


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


def wants_checkpoint(policy: str, state: State, obs: Observation) -> bool:
    """Checkpoint the boundary before `obs`? 'events': before memory injections,
    consequential tool commits and compactions; 'every': every turn boundary."""
    if policy == "every":
        return True
    if policy == "events":
        return obs.kind == "memory" or bool(state.plan) or obs.compact
    return False


def append(s: Session, obs: Observation, meter: Meter | None = None,
           fire: bool = True, hints=None, reuse=None) -> tuple[Session, tuple[LedgerEntry, ...]]:
    """Run one transition on the live session; returns the new side effects it committed.
    `hints`: recorded replies of this transition, used as drafts; `reuse`: B5′'s prefix cache
    (see `step`)."""
    r = s.state
    if s.checkpoints[-1].boundary != s.T and wants_checkpoint(s.policy, r, obs):
        s = _checkpoint(s, r, s.T)
    r2 = step(r, obs, meter, s.lm, hints, reuse)
    s.lm.after_step(r2)
    effects = r2.ledger[len(r.ledger):]
    s = replace(s, observations=s.observations + (obs,), states=s.states + (r2,))
    if fire:
        s = replace(s, world=s.world + effects)
    return s, effects


def run(observations, config: Config = Config(), policy: str = "every", model=lm.REFERENCE) -> Session:
    s = new_session(config, policy, model)
    for o in observations:
        s, _ = append(s, o)
    return s


# --- Algorithm 1 ------------------------------------------------------------------------

def counterfactual_stream(observations, sources) -> tuple[Observation, ...]:
    """o^{-z}: every observation with z's parts removed; empty observations stay transitions."""
    z = frozenset(sources)
    return tuple(o.without(z) for o in observations)


def locate_source(s: Session, source: str) -> tuple[str, ...]:
    """Line 1: s ← LocateSource(G, z): the observation artifacts that carried z."""
    found = tuple(a.id for a in s.state.artifacts
                  if a.parents == () and source in a.source_ids)
    if not found:
        if source in s.forgotten:
            raise UnknownSource(f"source {source!r} was already forgotten; nothing to do")
        known = sorted({src for o in s.observations for src in o.sources})
        raise UnknownSource(f"source {source!r} never entered this session; known sources: {known}")
    return found


def first_entry(s: Session, source_artifacts) -> int:
    """Line 2: τ ← FirstEntry(G, s): the transition at which z first entered."""
    by_id = {a.id: a for a in s.state.artifacts}
    return min(by_id[a].turn for a in source_artifacts)


def provenance_graph(state: State) -> nx.DiGraph:
    """G_t as a networkx DiGraph; node attributes carry the provenance tuple."""
    g = nx.DiGraph()
    for a in state.artifacts:
        g.add_node(a.id, type=a.type, turn=a.turn, source_ids=a.source_ids,
                   token_span=a.token_span, committed=a.committed)
        for p in a.parents:
            g.add_edge(p, a.id)
    return g


def taint_closure(graph: nx.DiGraph, source_artifacts) -> set[str]:
    """Line 3: I(z) ← TaintClosure(G, s) = {a : z ⇝_G a} (the sources included)."""
    out: set[str] = set()
    for a in source_artifacts:
        out.add(a)
        out |= nx.descendants(graph, a)
    return out


def suffix_closure(artifacts, source_artifacts) -> set[str]:
    """Line 3 without building G: the same set as `taint_closure(provenance_graph(R), ·)`.

    Artifacts are kept in creation order and every parent is created before its child, so
    one pass over the artifacts from the first source artifact on finds {a : z ⇝_G a}: the
    cost is the suffix's, not the session's."""
    out = set(source_artifacts)
    need, first = set(out), len(artifacts)
    for i in range(len(artifacts) - 1, -1, -1):  # back to the earliest source artifact
        if not need:
            break
        if artifacts[i].id in need:
            need.discard(artifacts[i].id)
            first = i
    if need:
        raise KeyError(f"source artifacts not in the graph: {sorted(need)}")
    for a in artifacts[first + 1:]:
        if a.id not in out and any(p in out for p in a.parents):
            out.add(a.id)
    return out


def choose_checkpoint(checkpoints, tau: int) -> Checkpoint:
    """Line 4: c* ← argmax{c ∈ C : boundary(c) < τ}."""
    return max((c for c in checkpoints if c.boundary < tau), key=lambda c: c.boundary)


def restore(s: Session, c: Checkpoint, meter: Meter) -> State:
    """Line 5: crop the cache to c's offset and load the environment snapshot.

    The cache is cropped when c's prompt manifest is still a prefix of the context; after a
    compaction rebuilt the cache, or in a new process, it is brought back from the stored
    trajectory: read from K/V pages where the engine keeps them (meter.tokens_restored),
    re-materialized from the recorded tokens otherwise (meter.tokens_rematerialized); neither
    counts as a transition. The non-KV layers at the boundary
    are read from the stored trajectory R_boundary (route (a) of Corollary 1).
    """
    stored = s.states[c.boundary]
    live = s.state
    env = dict(s.snapshots)[c.env_snapshot]
    if s.lm.resident(live.kv) and tuple(b.artifact for b in live.blocks[: len(c.manifest)]) == c.manifest:
        tokens, kv = live.tokens[: c.token_offset], s.lm.crop(live.kv, c.token_offset)
    else:
        tokens = stored.tokens
        kv, computed = s.lm.rebuild(tokens, stored.blocks)
        meter.tokens_rematerialized += computed
        meter.tokens_restored += len(tokens) - computed
    restored = replace(stored, tokens=tokens, kv=kv, env=env)
    if replace(restored, kv=None) != replace(stored, kv=None):
        raise UnseeError(f"checkpoint at boundary {c.boundary} does not restore R_{c.boundary}: the store is corrupt")
    length = getattr(s.lm, "kv_length", None)  # optional in the LM protocol: without it the cache goes unchecked
    if length is not None and length(kv) != len(tokens):
        raise UnseeError(f"checkpoint at boundary {c.boundary} restored a cache of {length(kv)} tokens for a context "
                         f"of {len(tokens)}: the cache does not describe R_{c.boundary}")
    return restored


def sanitize(obs: Observation, sources) -> Observation:
    """Line 7: õ_t ← Sanitize(o_t, z): remove z, keep the rest verbatim (A2)."""
    return obs.without(frozenset(sources))


def replay_tools(world: tuple[LedgerEntry, ...], effects: tuple[LedgerEntry, ...]):
    """Line 8: shadow-execute consequential calls with call-id de-duplication (A3).

    A call whose id and arguments match a committed one is recognised (never fired again).
    Any other counterfactual call is *not* fired either: it is returned for compensation.
    Arguments are compared as canonical JSON text and reported decoded (JSON objects).
    """
    committed = {e.call_id: e for e in world}
    dedup, differs = [], []
    for e in effects:
        old = committed.get(e.call_id)
        if old is not None and old.tool == e.tool and old.args == e.args:
            dedup.append(e.call_id)
        else:
            differs.append({"call_id": e.call_id, "tool": e.tool, "args": arguments(e.args),
                            "committed": None if old is None else arguments(old.args),
                            "reason": "not committed" if old is None else "arguments differ"})
    return dedup, differs


def arguments(args: str):
    """A call's arguments as the JSON value they encode (what receipts and compensation show)."""
    return json.loads(args)


def replay_suffix(s: Session, start: State, boundary: int, sources, meter: Meter, drafts: bool = False,
                  reuse=None):
    """Lines 6–10 on the live session from R_boundary; returns the new session and the A3 report.

    drafts=True hands each transition the replies the recorded run produced as drafts: F checks
    each against the counterfactual context and keeps it only where it is F's own reply, so
    the result is exactly what decoding would give (see `step`). `reuse`: B5′'s prefix cache
    (`LM.prefix_cache`)."""
    kept = tuple(c for c in s.checkpoints if c.boundary <= boundary)
    # the prefix's log loses z's parts too: a part of z that F never read before τ (one standing
    # instead of another source) is still z's text, and the twin's log never held it
    t = replace(s, observations=counterfactual_stream(s.observations[:boundary], sources),
                states=s.states[:boundary] + (start,), checkpoints=kept)
    dedup: list[str] = []
    comp: list[dict] = []
    replayed = []
    for i, obs in enumerate(s.observations[boundary:], boundary + 1):
        o = sanitize(obs, sources)
        replayed.append(o)
        hints = s.states[i].outputs if drafts else None
        t, effects = append(t, o, meter, fire=False, hints=hints, reuse=reuse)  # line 9
        d, c = replay_tools(s.world, effects)
        dedup += d
        comp += c
    new_ids = {e.call_id for e in t.state.ledger}
    for e in s.world:  # committed after τ but absent from the counterfactual ledger
        if e.turn > boundary and e.call_id not in new_ids:
            comp.append({"call_id": e.call_id, "tool": e.tool, "args": None,
                         "committed": arguments(e.args), "reason": "counterfactual makes no such call"})
    used = {c.env_snapshot for c in t.checkpoints}  # drop snapshots only the forgotten suffix referenced
    t = replace(t, world=s.world, forgotten=s.forgotten | frozenset(sources),
                snapshots=tuple(x for x in dict.fromkeys(s.snapshots + t.snapshots) if x[0] in used))
    return t, dedup, comp, tuple(replayed)


def make_receipt(method, sources, tau, s, new, c, meter, t0, taint, dedup, comp, replayed) -> Receipt:
    """The receipt of a forget operator: what it read and recomputed, and the digests of the
    state it left (`c`: the checkpoint it spliced at; `t0`: when it started)."""
    return Receipt(tuple(sources), method, tau, s.T, c, meter.transitions, meter.tokens_prefilled,
                   meter.tokens_decoded, meter.tokens_rematerialized, time.perf_counter() - t0,
                   layer_digests(new.state, s.lm), tuple(sorted(taint)), tuple(comp), tuple(dedup), replayed,
                   meter.tokens_restored, meter.replies, meter.replies_skipped, meter.tokens_verified,
                   meter.tokens_reused)


def locate_target(s: Session, sources):
    """Lines 1–2 for several sources: the artifacts that carried them and the earliest τ."""
    if not sources:
        raise UnseeError("a forget request needs at least one source id")
    arts = tuple(a for src in sources for a in locate_source(s, src))
    tau = first_entry(s, arts)
    # A part that stands instead of a target is read only in the world without it, so o_t ≠ o^{-z}_t
    # there although z is not in G: the shared prefix (Lemma 1) ends before it too.
    z = frozenset(sources)
    shown = [t for t, o in enumerate(s.observations[:tau - 1], 1)
             if any(p.instead_of in z and p.source not in z for p in o.parts)]
    return arts, min(shown, default=tau)


def selective_replay(s: Session, sources, checkpoint: int | None = None,
                     drafts: bool = True) -> tuple[Session, Receipt]:
    """B7, Algorithm 1. `checkpoint` forces a coarser splice point c < τ (for ablations).

    Each replayed transition gets the recorded run's replies as drafts (drafts=True): a reply
    the target did not change is accepted after one check instead of being decoded again, and
    one it changed is decoded from its first changed token; either way the result is F's, bit
    for bit, with no oracle (the receipt counts replies skipped). drafts=False decodes every
    replayed reply (Algorithm 1 as written).
    """
    t0 = time.perf_counter()
    arts, tau = locate_target(s, sources)  # lines 1–2
    taint = suffix_closure(s.state.artifacts, arts)  # line 3
    cands = s.checkpoints if checkpoint is None else [c for c in s.checkpoints if c.boundary == checkpoint]
    if checkpoint is not None and (not cands or checkpoint >= tau):
        raise UnseeError(f"no checkpoint at boundary {checkpoint} before τ={tau}")
    c = choose_checkpoint(cands, tau)  # line 4
    meter = Meter()
    start = restore(s, c, meter)  # line 5
    # a draft may waste at most what the restore saved against a full reset, which computes every
    # one of R_c's context tokens at least once: B7 never computes more tokens than B5
    meter.draft_credit = len(start.tokens) - meter.tokens_rematerialized
    new, dedup, comp, replayed = replay_suffix(s, start, c.boundary, sources, meter, drafts)  # lines 6–10
    return new, make_receipt("B7", sources, tau, s, new, c.boundary, meter, t0, taint, dedup, comp, replayed)


def full_reset(s: Session, sources, prefix_cache: bool = False) -> tuple[Session, Receipt]:
    """B5: re-run from R_init over o^{-z}: T invocations of F.

    prefix_cache=True is B5′: the cache of R_T (resident, or read back from K/V pages in a new
    process) serves as a generic prefix cache, so a prompt block whose tokens continue a
    byte-identical prefix reuses its rows instead of being computed (decoding is always
    computed). The result is bit-exact like B5."""
    t0 = time.perf_counter()
    arts, tau = locate_target(s, sources)
    taint = suffix_closure(s.state.artifacts, arts)
    meter = Meter()
    if prefix_cache:
        kv = s.state.kv
        if not s.lm.resident(kv):  # a new process: the prefix cache is the stored R_T, read back
            kv, computed = s.lm.rebuild(s.state.tokens, s.state.blocks)
            meter.tokens_rematerialized += computed
            meter.tokens_restored += len(s.state.tokens) - computed
        reuse = s.lm.prefix_cache(kv, s.state.tokens)
    else:
        reuse = None
    start = replace(s.states[0], kv=s.lm.empty())  # a fresh R_init, nothing carried over
    new, dedup, comp, replayed = replay_suffix(s, start, 0, sources, meter, reuse=reuse)
    return new, make_receipt("B5'" if prefix_cache else "B5", sources, tau, s, new, 0, meter, t0, taint, dedup, comp, replayed)
