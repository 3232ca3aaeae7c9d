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

from unsee.specs import statements as S
from unsee.specs.strategies import TARGETS, configs, format_program, programs


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


def coverage_of(ob: S.Observed, tally: Tally) -> None:
    r = ob.receipt
    if ob.tau == 1:
        tally.note("tau == 1")
    if ob.tau == ob.T:
        tally.note("tau == T")
    if 1 < ob.tau < ob.T:
        tally.note("1 < tau < T")
    if any(o.compact for o in ob.stream[ob.tau - 1:]):
        tally.note("compaction at or after tau")
    if any(o.tool == "send" for o in ob.stream[ob.tau - 1:]):
        tally.note("consequential tool at or after tau")
    if len(ob.sources) > 1:
        tally.note("several targets in one forget")
    if r.checkpoint < ob.tau - 1:
        tally.note("coarser checkpoint c < tau-1")
    if r.compensation:
        tally.note("side effect needs compensation (A3 fails)")
    if getattr(r, "tokens_rematerialized", 0):
        tally.note("cache re-materialized (not resident)")


def check_forget(factory, observations, sources, tally: Tally) -> S.Observed:
    """Observe one forget and check every statement; count exact and optimal ones."""
    ob = S.observe(factory, observations, sources)
    tally.forgets += 1
    coverage_of(ob, tally)
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


def execute(program, factory: Callable, tally: Tally) -> None:
    """Run one program on a live runtime; at each forget, check the statements on a fresh
    observation of the same log and check that the live runtime lands on the same state."""
    rt = factory()
    rt.reset()
    for op, arg in program:
        if op == "obs":
            rt.step(arg)
            continue
        present = present_targets(rt.observations)
        if not present:
            continue
        chosen = tuple(sorted({present[k % len(present)] for k in arg}))
        ob = check_forget(factory, tuple(rt.observations), chosen, tally)
        rt.forget(list(chosen))
        d = S.diff_layers(dict(rt.digest()), ob.twin[-1])
        S.require(not d, f"Theorem 1 (live runtime, after earlier forgets): layers {d} differ from R^-z_T")
    S.assumption_a1_deterministic_decoding(factory, tuple(rt.observations))


def verify(factory_for: Callable[[dict], Callable], examples: int = 100, seed: int = 0,
           max_ops: int = 10, on_example: Callable[[Tally], None] | None = None,
           engine: str = "reference") -> dict:
    """Run `examples` random programs; returns the `unsee verify` JSON document."""
    tally = Tally()
    last: dict = {}
    t0 = time.perf_counter()

    @hyp_seed(seed)
    @settings(max_examples=examples, database=None, deadline=None, derandomize=False,
              suppress_health_check=list(HealthCheck),
              phases=(Phase.explicit, Phase.generate, Phase.shrink))
    @given(program=programs(max_ops), cfg=configs)
    def run_one(program, cfg):
        tally.examples += 1
        try:
            execute(program, factory_for(cfg), tally)
        except AssertionError as e:
            last.update(statement=type(e).__name__, message=str(e), config=cfg,
                        trace=format_program(program), length=len(program))
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
