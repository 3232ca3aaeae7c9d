"""Drive random programs through a runtime and check every statement at every forget.

Used by `unsee verify` and by the test suite. A runtime is built per example by a
`factory_for(config)` callable, where config is {"policy", "sampling", "seed"}.
"""

from __future__ import annotations

import re
import time
from contextlib import contextmanager
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from hypothesis import HealthCheck, Phase, event, given, reporting, settings
from hypothesis import seed as hyp_seed
from hypothesis.database import DirectoryBasedExampleDatabase

from unsee.specs import erasure as E
from unsee.specs import oracle
from unsee.specs import persistence as P
from unsee.specs import statements as S
from unsee.specs.protocol import call, checked
from unsee.specs.strategies import (
    TARGETS, configs, directed_programs, observation_code, placement_name, placements, program_json, programs,
)


@dataclass
class Tally:
    examples: int = 0
    directed: int = 0  # of which the directed programs (`strategies.directed_programs`)
    forgets: int = 0
    exact: int = 0
    optimal_invocations: int = 0
    coverage: Counter = field(default_factory=Counter)
    events: bool = True  # also a Hypothesis event (only inside a Hypothesis test)
    seal_checks: int = 0  # databases edited column by column (`check_seal`)
    columns: Counter = field(default_factory=Counter)  # (table, column) → edits refused
    schema: set = field(default_factory=set)  # every (table, column) of the databases seen
    persists: bool = False  # the runtime offers `persisted_files()`
    fires: bool = False  # the runtime fired a side effect before some forget

    def note(self, name: str) -> None:
        self.coverage[name] += 1
        if self.events:
            event(name)


def present_targets(observations) -> list[str]:
    return [z for z in TARGETS if any(oracle.carries(o, [z]) for o in observations)]


def coverage_of(ob: S.Observed, tally: Tally, method: str = "B7") -> None:
    r = ob.receipt
    if ob.tau == 1:
        tally.note("tau == 1")
    if ob.tau == ob.T:
        tally.note("tau == T")
    if 1 < ob.tau < ob.T:
        tally.note("1 < tau < T")
    if ob.T > 12:
        tally.note("session longer than 12 observations")
    if any(o.compact for o in ob.stream[ob.tau - 1:]):
        tally.note("compaction at or after tau")
    if any(o.tool == "send" for o in ob.stream[ob.tau - 1:]):
        tally.note("consequential tool at or after tau")
    if any(p.instead_of for o in ob.stream for p in o.parts):
        tally.note("instead_of parts")
    if len(ob.sources) > 1:
        tally.note("several targets in one forget")
        if len({oracle.first_entry(ob.stream, [z]) for z in ob.sources}) > 1:
            tally.note("several targets with different tau")
    if method == "B5":
        tally.note("method B5")
    elif r.checkpoint < ob.tau - 1:
        tally.note("coarser checkpoint c < tau-1")
    if ob.forced is not None and method == "B7":
        tally.note("checkpoint forced")
    if r.compensation:
        tally.note("side effect the twin does not make as committed: compensation listed")
    for turn, name in ((ob.tau - 1, "tau-1"), (ob.tau, "tau"), (ob.tau + 1, "tau+1")):
        if any(e.turn == turn for e in ob.world_before):
            tally.note(f"side effect committed at {name}")
    if ob.world_before:
        tally.fires = True
    c = r.checkpoint
    z = set(ob.sources)
    if any(p.source in z and p.instead_of for o in ob.stream[:c] for p in o.parts):
        tally.note("hidden part of the target in the prefix kept by the splice")
    if ob.persisted_after is not None:
        tally.persists = True
        if ob.erasure_checked:
            tally.note("forgotten bytes persisted before the forget")
    if (r.given or {}).get("tokens_rematerialized"):
        tally.note("cache re-materialized (not resident)")


class Trace:
    """The operations a program ran, as a Python snippet that replays them on the runtime under
    the kit's checks (`checking`), so that running it raises the failure it was printed for."""

    def __init__(self, config: dict | None = None) -> None:
        self.lines = [f"rt = checking(factory, {config!r})  # your runtime (drawn config) under the kit's checks"
                      if config else "rt = checking(factory)  # your runtime under the kit's checks", "rt.reset()"]

    def add(self, line: str) -> None:
        self.lines.append(line)

    def code(self) -> list[str]:
        return ["from unsee.model import Observation, Part", "from unsee.specs.harness import checking", *self.lines,
                "rt.finish()  # the end-of-run check (A1); with rt = factory(...) instead, the bare calls"]


class Checking:
    """A live runtime driven as the kit drives it: `step` passes the observation on and keeps the
    kit's own copy of the stream; `forget` checks every statement on a fresh observation of that
    log, then the live forget (after any earlier ones) against the same twin, and the runtime's
    log before and after; `finish` checks A1 on the final log. A violation raises there."""

    def __init__(self, factory: Callable, policy: str | None = None, tally: Tally | None = None) -> None:
        self.factory, self.policy = factory, policy
        self.tally = tally if tally is not None else Tally(events=False)
        self.rt = checked(call(factory, "factory()", "construction"), "the live runtime")
        self.log: list = []
        self.forgotten: tuple = ()  # (source, text) of every part forgotten so far
        self.history: list[tuple[str, ...]] = []  # the sources of each forget so far
        self.calls = 0

    def reset(self) -> None:
        self.rt.reset()
        self.log, self.forgotten, self.history = [], (), []

    def step(self, observation) -> None:
        self.calls += 1
        self.rt.step(observation)
        self.log.append(observation)

    def forget(self, sources, method: str = "B7", checkpoint: int | None = None) -> None:
        self.calls += 1
        chosen = tuple(sources)
        self.log, self.forgotten = forget_live(self.rt, self.factory, self.log, chosen, self.tally, method, checkpoint,
                                               self.policy, self.forgotten, self.history, f"step {self.calls}")
        self.history.append(chosen)

    def finish(self) -> None:
        S.assumption_a1_deterministic_decoding(self.factory, tuple(self.log))


def checking(factory: Callable, config: dict | None = None) -> Checking:
    """Your runtime under the kit's checks, as a failure's trace builds it: `factory(config)`
    (or `factory()` without a config) makes each runtime the checks need."""
    return Checking((lambda: factory(config)) if config is not None else factory, (config or {}).get("policy"))


def check_forget(factory, observations, sources, tally: Tally, method: str = "B7",
                 checkpoint: int | None = None, policy: str | None = None) -> S.Observed:
    """Observe one forget on a fresh runtime and check every statement; count exact and optimal ones."""
    ob = call(lambda: S.observe(factory, observations, sources, method=method, checkpoint=checkpoint, policy=policy),
              f"forget({list(sources)!r}, method={method!r}, checkpoint={checkpoint!r})",
              "a fresh runtime driven over the same log")
    tally.forgets += 1
    errors: list[AssertionError] = []
    for spec in S.FORGET_STATEMENTS:
        try:
            spec(ob)
        except AssertionError as e:
            errors.append(e)
            continue
        if spec is S.theorem1_splicing_equivalence:
            tally.exact += 1
        if spec is S.corollary1_optimal_invocations:
            tally.optimal_invocations += 1
    coverage_of(ob, tally, method)  # after the statements: the erasure statement counts what it judged
    if errors:
        raise errors[0]
    return ob


# What a live runtime's forget is checked against (its history before the forget is not
# observed step by step, so Lemmas 1 and 2 are checked on the fresh observation only)
LIVE_STATEMENTS = (S.theorem1_splicing_equivalence, S.protocol_reports_the_twin, S.corollary1_optimal_invocations,
                   S.assumption_a2_sanitized_stream, S.assumption_a3_side_effects,
                   S.privacy_nothing_forgotten_remains, E.erasure_nothing_forgotten_is_persisted)


def check_log(rt, log, where: str) -> None:
    got = checked(rt).observations
    if got != tuple(log):
        k = next((i for i, (a, b) in enumerate(zip(got, log), 1) if a != b), min(len(got), len(log)) + 1)
        raise S.SpecViolation(f"the runtime's log differs from the stream it was given {where}: "
                              f"{len(got)} observations against {len(log)}, first difference at t={k} "
                              "(the log must be o, sanitized of every forgotten source)")


def execute(program, factory: Callable, tally: Tally, trace: Trace | None = None, policy: str | None = None) -> None:
    """Run one program on a live runtime. The kit keeps its own copy of the stream and derives
    o^{-z} with the oracle. At each forget it checks every statement on a fresh observation of
    that log, then checks the live runtime's forget (after any earlier ones) against the same
    twin, through everything the protocol exposes, and checks the runtime's log against its
    own. `policy`: the checkpoint policy the runtime was built with, whose promised
    checkpoints are then checked (None: only the runtime's own list is known)."""
    trace = trace if trace is not None else Trace()
    run = Checking(factory, policy, tally)
    run.reset()
    for op, arg in program:
        if op == "obs":
            trace.add(f"rt.step({observation_code(arg)})")
            run.step(arg)
            continue
        present = present_targets(run.log)
        if not present:
            continue
        chosen = tuple(sorted({present[i % len(present)] for i in arg.picks}))
        tau = oracle.first_entry(run.log, chosen)
        checkpoint = None
        if arg.method == "B7" and arg.coarser is not None:
            before = sorted(b for b in run.rt.checkpoints if b < tau)
            checkpoint = before[arg.coarser % len(before)] if before else None
        args = f"{list(chosen)!r}" + (f", method={arg.method!r}" if arg.method != "B7" else "") + \
            (f", checkpoint={checkpoint}" if checkpoint is not None else "")
        trace.add(f"rt.forget({args})")
        run.forget(chosen, arg.method, checkpoint)  # "step k": k counts the trace's calls, as a rerun of it does
    run.finish()


def forget_live(rt, factory, log, chosen, tally: Tally, method: str = "B7", checkpoint: int | None = None,
                policy: str | None = None, forgotten: tuple = (), history=(), where: str = "") -> tuple[list, tuple]:
    """Forget `chosen` on the live runtime `rt`, whose log the kit holds as `log`: check every
    statement on a fresh runtime over that log, then the live forget (after any earlier ones,
    whose forgotten parts are `forgotten` and sources `history`) against the same twin through
    everything the protocol exposes. Returns the new log (the oracle's o^{-z}) and forgotten parts."""
    check_log(rt, log, f"before the forget at {where}")
    note_placement(log, chosen, list(history), policy, tally, method, checkpoint)
    ob = check_forget(factory, tuple(log), chosen, tally, method, checkpoint, policy)
    forgotten = tuple(dict.fromkeys(tuple(forgotten) + S.forgotten_parts(log, chosen)))
    live = S.Observed(tuple(log), tuple(chosen), ob.tau, twin=ob.twin, twin_invocations=ob.twin_invocations,
                      twin_world=ob.twin_world, twin_graph=ob.twin_graph, twin_log=ob.twin_log,
                      twin_layers=ob.twin_layers, twin_persisted=ob.twin_persisted, forgotten=forgotten,
                      policy=policy, forced=0 if method == "B5" else checkpoint)
    S.record_forget(rt, live, method, checkpoint)
    try:
        for spec in LIVE_STATEMENTS:
            spec(live)
        check_seal(rt, tally)
    except S.SpecViolation as e:
        raise type(e)(f"{e} [the live runtime, forget at {where}]") from None
    log = list(oracle.counterfactual(log, chosen))
    check_log(rt, log, f"after the forget at {where}")
    return log, forgotten


# Databases edited column by column in one run: at least this many, and more (up to the most) while
# a table with rows has a column no edit reached yet (a side-effect ledger fills only once a call fires)
SEAL_CHECKS, SEAL_CHECKS_MOST = 3, 20


def check_seal(rt, tally: Tally) -> None:
    """The seal obligation on the live runtime's database, where it offers one: each column of one row
    of each table edited in a copy, each edit refused (`E.integrity_every_persisted_column_is_sealed`)."""
    database = P.persisted_database(rt)
    if database is None:
        return
    every, filled = E.columns_with_rows(database)
    tally.schema |= every
    if tally.seal_checks >= SEAL_CHECKS and (tally.seal_checks >= SEAL_CHECKS_MOST or filled <= set(tally.columns)):
        return
    edited = E.integrity_every_persisted_column_is_sealed(database, lambda path: P.accepts(rt, path),
                                                          pick=tally.seal_checks)
    tally.seal_checks += 1
    tally.columns.update(edited)


# Placements a run must reach to vouch for a runtime: the kit's coverage line gives the share
# of forgets that hit each, and the default run fails if one is never reached.
TARGETS_COVERED = (
    "compaction right before tau",
    "policy has no checkpoint at tau-1",
    "forget after an earlier forget",
    "target inside an instead_of part",
    "target in several parts of one observation",
    "forgotten text also under another source",
    "target re-entering after its forget",
    "z1, then z2, then z1 again",
    "several targets with different tau",
)
# ... and, for a runtime that fires side effects, the compensation rule at its boundaries; for one that
# persists, a forget whose forgotten bytes were persisted before it (else the erasure check is vacuous)
SIDE_EFFECT_TARGETS = ("side effect committed at tau-1", "side effect committed at tau",
                       "side effect committed at tau+1")
PERSISTENCE_TARGETS = ("forgotten bytes persisted before the forget",
                       "hidden part of the target in the prefix kept by the splice")


# every combination of where the statements' rules fall (strategies.placements), reached by
# construction: `verify` runs one directed program per combination before the random ones
PLACEMENT_TARGETS = tuple(placement_name(*p) for p in placements())


def targets_for(tally: Tally) -> tuple[str, ...]:
    """The coverage targets that apply to the runtime a run drove."""
    return (TARGETS_COVERED + PLACEMENT_TARGETS + (SIDE_EFFECT_TARGETS if tally.fires else ())
            + (PERSISTENCE_TARGETS if tally.persists else ()))


def placement_of(log, chosen, policy, method: str, checkpoint) -> str | None:
    """The combination of placements (`strategies.placements`) a forget of `chosen` lands on."""
    tau, T = oracle.first_entry(log, chosen), len(log)
    if method == "B5":
        splice = "reset (B5)"
    elif checkpoint is not None:
        splice = "c* forced coarser" if checkpoint < tau - 1 else "c*=tau-1"
    elif policy is not None and tau - 1 not in oracle.promised_checkpoints(policy, log):
        splice = "policy lacks tau-1"
    else:
        splice = "c*=tau-1"
    compaction = ("compaction right before tau" if tau >= 2 and log[tau - 2].compact else
                  "compaction after tau" if any(o.compact for o in log[tau:]) else "no compaction")
    sends = [t + 1 for t, o in enumerate(log, 1) if o.tool == "send"]  # the transitions calls commit in
    effect = next((f"call committed at {name}" for at, name in ((tau - 1, "tau-1"), (tau, "tau"), (tau + 1, "tau+1"))
                   if at in sends and at <= T), "no call")
    return placement_name(splice, "tau<T" if tau < T else "tau=T", compaction, effect)


def note_placement(log, chosen, history, policy, tally: Tally, method: str = "B7", checkpoint=None) -> None:
    """Count the placements of this forget that the coverage targets name (before it runs)."""
    tau = oracle.first_entry(log, chosen)
    z = set(chosen)
    name = placement_of(log, chosen, policy, method, checkpoint)
    if name in PLACEMENT_TARGETS:
        tally.note(name)
    if tau >= 2 and log[tau - 2].compact:
        tally.note("compaction right before tau")
    if policy is not None and tau - 1 not in oracle.promised_checkpoints(policy, log):
        tally.note("policy has no checkpoint at tau-1")
    if history:
        tally.note("forget after an earlier forget")
    if any(p.source in z and p.instead_of for o in log for p in o.parts):
        tally.note("target inside an instead_of part")
    if any(sum(p.source in z for p in o.parts) > 1 for o in log):
        tally.note("target in several parts of one observation")
    texts = {p.text for o in log for p in o.parts if p.source in z and p.text}
    if any(p.text in texts for o in log for p in o.parts if p.source not in z):
        tally.note("forgotten text also under another source")
    if any(z & set(h) for h in history):
        tally.note("target re-entering after its forget")
    if any(z & set(h) and any(set(g) - set(h) for g in history[i + 1:]) for i, h in enumerate(history)):
        tally.note("z1, then z2, then z1 again")


def verify(factory_for: Callable[[dict], Callable], examples: int = 100, seed: int = 0,
           max_ops: int = 10, on_example: Callable[[Tally], None] | None = None,
           engine: str = "reference", max_steps: int = 40, shrink_seconds: float = 20.0,
           directed: bool = True, database: str | None = None) -> dict:
    """Run one directed program per placement (`strategies.placements`; `directed=False` skips
    them), then, if none failed, `examples` random programs; returns the `unsee verify` JSON
    document. A directed failure is reported once per kind (statement and first line). `database`: a
    folder where Hypothesis keeps the failing examples it found, replayed first by the next run.

    Every distinct failure Hypothesis reports comes back with its own runnable trace; shrinking
    stops after `shrink_seconds` (the trace is then shorter than drawn, if not minimal)."""
    tally = Tally()
    t0 = time.perf_counter()

    @hyp_seed(seed)
    @settings(max_examples=max(examples, 1), deadline=None, derandomize=False,
              database=None if database is None else DirectoryBasedExampleDatabase(database),
              suppress_health_check=list(HealthCheck),
              phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink))
    @given(program=programs(max_ops, max(max_steps, max_ops)), cfg=configs)
    def run_one(program, cfg):
        tally.examples += 1
        trace = Trace(cfg)
        try:
            execute(program, factory_for(cfg), tally, trace, policy=cfg.get("policy"))
        except AssertionError as e:
            e.unsee_failure = dict(statement=type(e).__name__, message=str(e), config=cfg, program=program_json(program),
                                   trace=trace.code(), length=len(trace.lines) - 2)
            raise
        finally:
            if on_example is not None:
                on_example(tally)

    failures = []
    stopped: list[str] = []
    events, tally.events = tally.events, False  # (outside Hypothesis' test: no events to record)
    for cfg, program in directed_programs() if directed else ():  # every placement, whatever the seed
        tally.examples += 1
        tally.directed += 1
        trace = Trace(cfg)
        try:
            execute(program, factory_for(cfg), tally, trace, policy=cfg.get("policy"))
        except AssertionError as e:
            sign = (type(e).__name__, signature(str(e)))
            if sign not in {f["signature"] for f in failures}:  # one report per kind of failure
                failures.append(dict(statement=type(e).__name__, message=str(e), config=cfg, trace=trace.code(),
                                     length=len(trace.lines) - 2, directed=True, program=program_json(program),
                                     signature=sign))
        finally:
            if on_example is not None:
                on_example(tally)
    tally.events = events

    def reporter(message) -> None:  # Hypothesis' own note on stopping is about its 300 s default
        if str(message).startswith("WARNING: Hypothesis has spent more than"):
            stopped.append(str(message))
        else:
            reporting.default(message)

    for f in failures:
        f.pop("signature")
    with bounded_shrinking(shrink_seconds), reporting.with_reporter(reporter):
        try:
            if examples and not failures:  # a directed session failed: its short trace is the report
                run_one()
        except AssertionError as e:
            failures.append(e.unsee_failure)
        except BaseExceptionGroup as group:  # several distinct failures: each with its own trace
            # the failures `run_one` tagged; anything else in the group is not a finding
            found, rest = group.split(lambda x: hasattr(x, "unsee_failure"))
            if rest is not None:
                raise rest
            failures += [x.unsee_failure for x in leaves(found)]
    forgets = max(tally.forgets, 1)
    return {
        "engine": engine,
        "examples": tally.examples,
        "directed": tally.directed,
        "forgets": tally.forgets,
        "exact": tally.exact,
        "optimal_invocations": tally.optimal_invocations,
        "failures": failures,
        "coverage": dict(sorted(tally.coverage.items())),
        "shrinking_stopped_after_s": shrink_seconds if stopped else None,
        "targets": {k: {"forgets": tally.coverage.get(k, 0), "share": round(tally.coverage.get(k, 0) / forgets, 3)}
                    for k in targets_for(tally)},
        "seal": None if not tally.schema else {
            "databases_edited": tally.seal_checks, "columns": len(tally.schema),
            "refused": sorted(f"{t}.{c}" for t, c in tally.columns),
            "never_edited": sorted(f"{t}.{c}" for t, c in tally.schema - set(tally.columns))},
        "seconds": round(time.perf_counter() - t0, 2),
    }


def signature(message: str) -> str:
    """What a failure says, without where (numbers, lists, the call it was at): two directed sessions
    that fail alike are one report."""
    head = re.split(r" at | \(", message.split("\n")[0], maxsplit=1)[0]
    return re.sub(r"\[[^\]]*\]|\d+", "#", head)


def leaves(group: BaseExceptionGroup) -> list[BaseException]:
    return [y for x in group.exceptions for y in (leaves(x) if isinstance(x, BaseExceptionGroup) else [x])]


@contextmanager
def bounded_shrinking(seconds: float):
    """Hypothesis shrinks for up to 300 s by default; a long session's failure needs far less
    to become readable. Its engine reads this bound when shrinking starts."""
    from hypothesis.internal.conjecture import engine

    old = engine.MAX_SHRINKING_SECONDS
    engine.MAX_SHRINKING_SECONDS = seconds
    try:
        yield
    finally:
        engine.MAX_SHRINKING_SECONDS = old
