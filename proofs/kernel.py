"""A tiny proof kernel over Z3: every obligation ends as proved, counterexample or unknown.

`prove(assumptions, goal)` is a validity claim: it first checks that the assumptions are
satisfiable (a proof from contradictory assumptions proves nothing, so that is reported
as unknown, never as proved), then asks Z3 for a model of assumptions ∧ ¬goal: none
means proved; one is the counterexample.

`exhibit(constraints)` is an existence claim (a counter-model *for some other operator*):
a model proves it, and the model is kept as the witness; unsat refutes it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import z3

PROVED, COUNTEREXAMPLE, UNKNOWN = "proved", "counterexample", "unknown"
TIMEOUT_MS = 20_000


@dataclass(frozen=True)
class Result:
    name: str
    statement: str
    result: str
    seconds: float
    model: str | None = None  # the counterexample, or the witness of an existence claim
    detail: str = ""
    bounds: str = ""  # the bounds the check actually used ("unbounded" for the step proofs)

    @property
    def ok(self) -> bool:
        return self.result == PROVED

    def to_json(self) -> dict:
        d = {"name": self.name, "statement": self.statement, "result": self.result,
             "seconds": round(self.seconds, 4), "bounds": self.bounds}
        if self.model:
            d["model"] = self.model
        if self.detail:
            d["detail"] = self.detail
        return d


def _solver() -> z3.Solver:
    s = z3.Solver()
    s.set("timeout", TIMEOUT_MS)
    return s


def check_valid(assumptions, goal) -> tuple[str, str | None, str]:
    """(result, model, detail) for 'assumptions ⇒ goal'."""
    s = _solver()
    s.add(*assumptions)
    sat = s.check()
    if sat == z3.unsat:
        return UNKNOWN, None, "vacuous: the assumptions are unsatisfiable"
    if sat == z3.unknown:
        return UNKNOWN, None, f"assumptions: {s.reason_unknown()}"
    s.add(z3.Not(goal))
    r = s.check()
    if r == z3.unsat:
        return PROVED, None, ""
    if r == z3.sat:
        return COUNTEREXAMPLE, str(s.model()), ""
    return UNKNOWN, None, s.reason_unknown()


def check_exists(constraints) -> tuple[str, str | None, str]:
    s = _solver()
    s.add(*constraints)
    r = s.check()
    if r == z3.sat:
        return PROVED, str(s.model()), ""
    if r == z3.unsat:
        return COUNTEREXAMPLE, None, "no witness exists"
    return UNKNOWN, None, s.reason_unknown()


def combine(name: str, statement: str, parts, t0: float) -> Result:
    """Fold many (result, model, detail) checks into one result: proved iff all are."""
    for label, (res, model, detail) in parts:
        if res != PROVED:
            return Result(name, statement, res, time.perf_counter() - t0, model, f"{label}: {detail}".strip(": "))
    return Result(name, statement, PROVED, time.perf_counter() - t0, None, f"{len(parts)} checks")
