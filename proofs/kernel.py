"""A tiny proof kernel over Z3: every obligation ends as proved, counterexample or unknown.

`check_valid(assumptions, goal)` is a validity claim (∀): it first checks that the assumptions
are satisfiable (a proof from contradictory assumptions proves nothing, so that is reported as
unknown, never as proved), then asks Z3 for a model of assumptions ∧ ¬goal: none (unsat) means
proved; one is the counterexample. Where the assumptions are quantified and Z3 cannot decide
their satisfiability alone, `witness` narrows them to a small model (a model of assumptions ∧
witness is a model of the assumptions).

`check_exists(constraints)` is an existence claim (a counter-model *for some other operator*):
a model proves it, and the model is kept as the witness; unsat refutes it.

Every query the kernel sends to Z3 is recorded, while `recording()` is active, as SMT-LIB 2
with the answer Z3 gave and the answer the claim needs (`unsee.proofs.certificates` writes
them out and re-checks them with a second solver).
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from dataclasses import dataclass

import z3

PROVED, COUNTEREXAMPLE, UNKNOWN = "proved", "counterexample", "unknown"
# Z3's resource limit per query (its `rlimit`: a count of Z3's own steps), not a wall-clock
# timeout: the same query gets the same answer however loaded the machine is, where a timeout
# turned a slow proof into unknown under load. Each query is solved in a fresh context (`_check`),
# so the count is the query's own: the costliest at `unsee prove`'s default bound takes 39,064;
# this is over 600 times that, some 12 s of Z3 on an idle core for a query it cannot answer.
# Past it the answer is unknown, which is a failure.
RLIMIT = 25_000_000

# What a row establishes (its own column in the table and the JSON).
VALIDITY = "validity"  # ∀: assumptions ∧ ¬goal is unsat
EXISTENCE = "existence"  # ∃: a model is the witness (a counter-model for other operators)
SAMPLES = "checked on samples"  # concrete sessions, each an SMT check; says nothing beyond them
ENCODING = "encoding check"  # holds by how the terms are built; never counted as a proof
EXHAUSTIVE = "exhaustive on small inputs"  # code ties: the real function on every input within a bound
KINDS = (VALIDITY, EXISTENCE, SAMPLES, ENCODING, EXHAUSTIVE)


@dataclass(frozen=True)
class Result:
    name: str
    statement: str
    result: str
    seconds: float
    model: str | None = None  # the counterexample, or the witness of an existence claim
    detail: str = ""
    bounds: str = ""  # the bounds the check actually used ("unbounded" only where it has none)
    kind: str = ""  # one of KINDS
    abstracts: tuple = ()  # the code ties: dicts naming each function of unsee.model and its check

    @property
    def ok(self) -> bool:
        return self.result == PROVED

    def to_json(self) -> dict:
        d = {"name": self.name, "kind": self.kind, "statement": self.statement, "result": self.result,
             "seconds": round(self.seconds, 4), "bounds": self.bounds, "abstracts": list(self.abstracts)}
        if self.model:
            d["model"] = self.model
        if self.detail:
            d["detail"] = self.detail
        return d


@dataclass(frozen=True)
class Query:
    """One query sent to Z3: `expected` is the answer the claim needs, `z3` the one Z3 gave."""

    label: str  # "assumptions", "negated goal" or "witness"
    smt2: str
    expected: str  # "sat" or "unsat"
    z3: str


_recording: contextvars.ContextVar[list | None] = contextvars.ContextVar("recording", default=None)


@contextlib.contextmanager
def recording():
    """Collect every query the kernel sends while the block runs (a list of Query)."""
    queries: list[Query] = []
    token = _recording.set(queries)
    try:
        yield queries
    finally:
        _recording.reset(token)


def _check(s: z3.Solver, label: str, expected: str):
    """Z3's answer on s's assertions, solved from their SMT-LIB text in a fresh context.

    The rlimit makes an answer independent of the machine's load, not of the process's history:
    Z3 orders terms by their ids in the context, so a query built after many others (a whole test
    run, CrossHair's own queries) searches in another order and can exhaust the limit where the
    same query in a fresh process does not. Solving the text, which is also the certificate that
    cvc5 re-checks, gives the same answer in any process. Returns (answer, the solver that gave it)."""
    text = s.to_smt2()
    fresh = z3.Solver(ctx=z3.Context())
    fresh.set("rlimit", RLIMIT)
    fresh.from_string(text)
    answer = fresh.check()
    queries = _recording.get()
    if queries is not None:
        queries.append(Query(label, text, expected, str(answer)))
    return answer, fresh


def check_valid(assumptions, goal, witness=()) -> tuple[str, str | None, str]:
    """(result, model, detail) for 'assumptions ⇒ goal'."""
    s = z3.Solver()
    s.add(*assumptions, *witness)
    sat, solved = _check(s, "assumptions", "sat")
    if sat == z3.unsat:
        return UNKNOWN, None, "vacuous: the assumptions are unsatisfiable" + (" with the witness" if witness else "")
    if sat == z3.unknown:
        return UNKNOWN, None, f"assumptions: {solved.reason_unknown()}"
    if witness:  # the witness narrows the assumptions: the goal is asked of them alone
        s = z3.Solver()
        s.add(*assumptions)
    s.add(z3.Not(goal))
    r, solved = _check(s, "negated goal", "unsat")
    if r == z3.unsat:
        return PROVED, None, ""
    if r == z3.sat:
        return COUNTEREXAMPLE, str(solved.model()), ""
    return UNKNOWN, None, solved.reason_unknown()


def check_exists(constraints) -> tuple[str, str | None, str]:
    s = z3.Solver()
    s.add(*constraints)
    r, solved = _check(s, "witness", "sat")
    if r == z3.sat:
        return PROVED, str(solved.model()), ""
    if r == z3.unsat:
        return COUNTEREXAMPLE, None, "no witness exists"
    return UNKNOWN, None, solved.reason_unknown()


def combine(name: str, statement: str, parts, t0: float) -> Result:
    """Fold many (result, model, detail) checks into one result: proved iff all are."""
    for label, (res, model, detail) in parts:
        if res != PROVED:
            return Result(name, statement, res, time.perf_counter() - t0, model, f"{label}: {detail}".strip(": "))
    return Result(name, statement, PROVED, time.perf_counter() - t0, None, f"{len(parts)} checks")
