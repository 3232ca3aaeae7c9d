"""Drive random programs through a runtime and check every statement at every forget.

Used by `unsee verify` and by the test suite. A runtime is built per example by a
`factory_for(config)` callable, where config is {"policy", "sampling", "seed"}.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import seed as hyp_seed

from unsee.model.session import counterfactual_stream
from unsee.specs import statements as S
from unsee.specs.strategies import TARGETS, configs, observation_code, programs


@dataclass
class Tally:
    examples: int = 0
    forgets: int = 0
    exact: int = 0
    optimal_invocations: int = 0
    coverage: Counter = field(default_factory=Counter)

    def note(self, name: str) -> None:
        self.coverage[name] += 1
        event(name)


def present_targets(observations) -> list[str]:
    return [z for z in TARGETS if any(z in o.sources for o in observations)]


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
        if len({S.first_entry_of(ob.stream, [z]) for z in ob.sources}) > 1:
            tally.note("several targets with different tau")
    if method == "B5":
        tally.note("method B5")
    elif r.checkpoint < ob.tau - 1:
        tally.note("coarser checkpoint c < tau-1")
    if ob.forced is not None and method == "B7":
        tally.note("checkpoint forced")
    if r.compensation:
        tally.note("side effect needs compensation (A3 fails)")
    if getattr(r, "tokens_rematerialized", 0):
        tally.note("cache re-materialized (not resident)")


class RuntimeRaised(S.SpecViolation):
    """The runtime under test raised an exception where the protocol expects a result."""


class Trace:
    """The operations a program ran, as a Python snippet that replays them on the runtime."""

    def __init__(self, config: dict | None = None) -> None:
        self.lines = [f"rt = factory({config!r})  # your runtime, with the drawn config" if config else
                      "rt = factory()  # your runtime", "rt.reset()"]

    def add(self, line: str) -> None:
        self.lines.append(line)

    def code(self) -> list[str]:
        return ["from unsee.model import Observation, Part", *self.lines]


def call(fn, what: str, where: str):
    """Run one protocol call; an exception becomes a violation that names it."""
    try:
        return fn()
    except AssertionError:
        raise
    except Exception as e:  # noqa: BLE001 -- any exception of the runtime is the finding
        raise RuntimeRaised(f"the runtime raised {type(e).__name__}: {e} at {where} ({what})") from e


def check_forget(factory, observations, sources, tally: Tally, method: str = "B7",
                 checkpoint: int | None = None) -> S.Observed:
    """Observe one forget on a fresh runtime and check every statement; count exact and optimal ones."""
    ob = call(lambda: S.observe(factory, observations, sources, method=method, checkpoint=checkpoint),
              f"forget({list(sources)!r}, method={method!r}, checkpoint={checkpoint!r})",
              "a fresh runtime driven over the same log")
    tally.forgets += 1
    coverage_of(ob, tally, method)
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
    if errors:
        raise errors[0]
    return ob


# What a live runtime's forget is checked against (its history before the forget is not
# observed step by step, so Lemmas 1 and 2 are checked on the fresh observation only)
LIVE_STATEMENTS = (S.theorem1_splicing_equivalence, S.protocol_reports_the_twin, S.corollary1_optimal_invocations,
                   S.assumption_a2_sanitized_stream, S.assumption_a3_side_effects)


def check_log(rt, log, where: str) -> None:
    got = tuple(call(lambda: tuple(rt.observations), "rt.observations", where))
    if got != tuple(log):
        k = next((i for i, (a, b) in enumerate(zip(got, log), 1) if a != b), min(len(got), len(log)) + 1)
        raise S.SpecViolation(f"the runtime's log differs from the stream it was given {where}: "
                              f"{len(got)} observations against {len(log)}, first difference at t={k} "
                              "(the log must be o, sanitized of every forgotten source)")


def execute(program, factory: Callable, tally: Tally, trace: Trace | None = None) -> None:
    """Run one program on a live runtime. The kit keeps its own copy of the stream and derives
    o^{-z} itself. At each forget it checks every statement on a fresh observation of that
    log, then checks the live runtime's forget (after any earlier ones) against the same twin,
    through everything the protocol exposes, and checks the runtime's log against its own."""
    trace = trace if trace is not None else Trace()
    rt = call(factory, "factory()", "construction")
    call(rt.reset, "rt.reset()", "the start")
    log: list = []
    done = 0  # forgets the live runtime has run
    for k, (op, arg) in enumerate(program, 1):
        if op == "obs":
            trace.add(f"rt.step({observation_code(arg)})")
            call(lambda: rt.step(arg), "rt.step(...)", f"step {k}")
            log.append(arg)
            continue
        present = present_targets(log)
        if not present:
            continue
        chosen = tuple(sorted({present[i % len(present)] for i in arg.picks}))
        tau = S.first_entry_of(log, chosen)
        checkpoint = None
        if arg.method == "B7" and arg.coarser is not None:
            before = sorted(b for b in call(lambda: tuple(rt.checkpoints), "rt.checkpoints", f"step {k}") if b < tau)
            checkpoint = before[arg.coarser % len(before)] if before else None
        args = f"{list(chosen)!r}" + (f", method={arg.method!r}" if arg.method != "B7" else "") + \
            (f", checkpoint={checkpoint}" if checkpoint is not None else "")
        trace.add(f"receipt = rt.forget({args})")
        check_log(rt, log, f"before the forget at step {k}")
        ob = check_forget(factory, tuple(log), chosen, tally, arg.method, checkpoint)
        live = S.Observed(tuple(log), chosen, tau, twin=ob.twin, twin_invocations=ob.twin_invocations,
                          twin_world=ob.twin_world, twin_graph=ob.twin_graph,
                          forced=0 if arg.method == "B5" else checkpoint)
        call(lambda: S.record_forget(rt, live, arg.method, checkpoint), f"rt.forget({args})", f"step {k}")
        for spec in LIVE_STATEMENTS:
            try:
                spec(live)
            except S.SpecViolation as e:
                raise type(e)(f"{e} [the live runtime, forget at step {k}]") from None
        log = list(counterfactual_stream(log, chosen))
        check_log(rt, log, f"after the forget at step {k}")
        if done:
            tally.note("forget after an earlier forget (live runtime)")
        done += 1
    S.assumption_a1_deterministic_decoding(factory, tuple(log))


def verify(factory_for: Callable[[dict], Callable], examples: int = 100, seed: int = 0,
           max_ops: int = 10, on_example: Callable[[Tally], None] | None = None,
           engine: str = "reference", max_steps: int = 40) -> dict:
    """Run `examples` random programs; returns the `unsee verify` JSON document."""
    tally = Tally()
    last: dict = {}
    t0 = time.perf_counter()

    @hyp_seed(seed)
    @settings(max_examples=examples, database=None, deadline=None, derandomize=False,
              suppress_health_check=list(HealthCheck),
              phases=(Phase.explicit, Phase.generate, Phase.shrink))
    @given(program=programs(max_ops, max(max_steps, max_ops)), cfg=configs)
    def run_one(program, cfg):
        tally.examples += 1
        trace = Trace(cfg)
        try:
            execute(program, factory_for(cfg), tally, trace)
        except AssertionError as e:
            last.update(statement=type(e).__name__, message=str(e), config=cfg,
                        trace=trace.code(), length=len(trace.lines) - 2)
            raise
        finally:
            if on_example is not None:
                on_example(tally)

    failures = []
    try:
        run_one()
    except AssertionError:
        failures.append(dict(last))
    return {
        "engine": engine,
        "examples": tally.examples,
        "forgets": tally.forgets,
        "exact": tally.exact,
        "optimal_invocations": tally.optimal_invocations,
        "failures": failures,
        "coverage": dict(sorted(tally.coverage.items())),
        "seconds": round(time.perf_counter() - t0, 2),
    }
