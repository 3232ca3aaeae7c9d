"""Re-checkable certificates: every SMT query of `unsee prove` as SMT-LIB 2, re-checked by cvc5.

`emit(doc, folder)` writes, for each obligation, encoding check and refuted statement, every
query the kernel sent to Z3 as one `.smt2` file (with `(set-info :status …)` holding the answer
the claim needs), an `index.json` listing them (row, query, expected answer, Z3's answer), and
this module's `recheck.py` beside them: `python recheck.py` re-checks every file with cvc5 and
exits non-zero on any answer other than the expected one (an unknown included).

What each answer means: for a validity row, "assumptions" must be sat (they are not
contradictory; with a witness, a narrower set is sat) and "negated goal" unsat (the claim holds);
for an existence row, "witness" sat; for a refuted statement, "negated goal" sat (a
counterexample). The code ties are Python checks, not SMT queries: they are re-run by `unsee
prove`, not certified here.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from unsee.proofs.recheck import cvc5_check, recheck  # noqa: F401  (the re-check is this module's too)


def expected_answer(group: str, label: str) -> str:
    """The answer a query needs for its row's verdict to hold."""
    if label == "negated goal":
        return "sat" if group == "refuted" else "unsat"
    return "sat"  # "assumptions" (not contradictory) and "witness" (it exists)


def as_file(smt2: str, expected: str) -> str:
    """Z3's text with the expected status and a logic cvc5 accepts without warnings."""
    body = re.sub(r"\(set-info :status \w+\)", f"(set-info :status {expected})", smt2, count=1)
    return "(set-logic ALL)\n" + body


def emit(doc: dict, folder: Path) -> list[dict]:
    """Write every recorded query of `doc` (run_all(..., record=True)) under `folder`; returns
    the index (one entry per file)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    groups = {r["name"]: g for g in ("obligations", "encoding_checks", "refuted") for r in doc.get(g, ())}
    index = []
    for name, queries in doc["queries"].items():
        group = groups[name]
        sub = folder / name
        sub.mkdir(exist_ok=True)
        for i, q in enumerate(queries):
            expected = expected_answer(group, q.label)
            path = sub / f"{i:04d}-{q.label.replace(' ', '-')}.smt2"
            path.write_text(as_file(q.smt2, expected))
            index.append({"file": str(path.relative_to(folder)), "row": name, "group": group, "query": q.label,
                          "expected": expected, "z3": q.z3})
    (folder / "index.json").write_text(json.dumps(index, indent=1))
    shutil.copyfile(Path(__file__).with_name("recheck.py"), folder / "recheck.py")
    return index
