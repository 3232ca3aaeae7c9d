#!/usr/bin/env python3
"""Re-check the SMT-LIB certificates of `unsee prove --emit DIR` with cvc5.

Run it in DIR (or give DIR): every file listed in index.json is given to cvc5 (pip install
cvc5), and its answer is compared with the answer the claim needs (`expected`) and with the
answer Z3 gave. Exit status 0 iff every query agrees; an unknown is a disagreement. This file
imports nothing from unsee, so a reviewer can run it on the folder alone.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import MappingProxyType

# Per query and strategy: cvc5's reproducible resource limit (--rlimit-per), not a time limit, so
# the answer does not depend on the machine's load. The costliest query of `unsee prove --emit`
# at --max-steps 16 takes about 54,000 units; past the limit (some 16 s of cvc5 on an idle core)
# the answer is unknown, a failure.
CVC5_RLIMIT = 2_000_000
# cvc5 strategies tried in turn until one answers sat or unsat (either answer is sound under any
# of them). Satisfiable queries under quantifiers need model-based instantiation or finite model
# finding to be answered at all, so a query expected sat tries those first.
STRATEGIES = MappingProxyType({"unsat": ((), (("mbqi", "true"),)),
                               "sat": ((("mbqi", "true"),), (("finite-model-find", "true"),), ())})


def cvc5_check(text: str, expected: str, rlimit: int = CVC5_RLIMIT) -> tuple[str, str]:
    """(answer, options used): cvc5's answer to one SMT-LIB script, trying the STRATEGIES for the
    expected answer in turn."""
    import cvc5

    answer = "unknown"
    for options in STRATEGIES[expected]:
        solver = cvc5.Solver()
        solver.setOption("rlimit-per", str(rlimit))
        for k, v in options:
            solver.setOption(k, v)
        parser = cvc5.InputParser(solver)
        parser.setStringInput(cvc5.InputLanguage.SMT_LIB_2_6, text, "query")
        symbols = parser.getSymbolManager()
        answer = "unknown"
        try:
            while True:
                cmd = parser.nextCommand()
                if cmd.isNull():
                    break
                out = cmd.invoke(solver, symbols).strip()
                if out:
                    answer = out.split()[0]
        except RuntimeError as e:  # a file cvc5 cannot read is a failure, reported as such
            return f"error: {e}", " ".join(f"--{k}" for k, _ in options) or "default"
        if answer in ("sat", "unsat"):
            return answer, " ".join(f"--{k}" for k, _ in options) or "default"
    return answer, "all strategies"


def recheck(folder: Path, index: list[dict] | None = None, on_query=None) -> dict:
    """Re-check every file of `folder` with cvc5; per row: queries, agreements, disagreements
    (a file whose cvc5 answer is not the expected one, unknown included, or whose Z3 answer was
    not), and the seconds cvc5 took."""
    folder = Path(folder)
    index = index if index is not None else json.loads((folder / "index.json").read_text())
    rows: dict[str, dict] = {}
    for entry in index:
        t0 = time.perf_counter()
        answer, options = cvc5_check((folder / entry["file"]).read_text(), entry["expected"])
        row = rows.setdefault(entry["row"], {"row": entry["row"], "group": entry["group"], "queries": 0,
                                             "agree": 0, "disagreements": [], "cvc5_seconds": 0.0})
        row["queries"] += 1
        row["cvc5_seconds"] += time.perf_counter() - t0
        if answer == entry["expected"] == entry["z3"]:
            row["agree"] += 1
        else:
            row["disagreements"].append({"file": entry["file"], "expected": entry["expected"], "z3": entry["z3"],
                                         "cvc5": answer, "cvc5 options": options})
        if on_query is not None:
            on_query(entry)
    for row in rows.values():
        row["cvc5_seconds"] = round(row["cvc5_seconds"], 3)
    return {"all_agree": all(not r["disagreements"] for r in rows.values()) and bool(rows),
            "queries": sum(r["queries"] for r in rows.values()), "rows": list(rows.values())}


def main(argv) -> int:
    folder = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent
    report = recheck(folder)
    for row in report["rows"]:
        status = "agree" if not row["disagreements"] else f"{len(row['disagreements'])} DISAGREE"
        print(f"{row['row']:40s} {row['group']:16s} {row['agree']}/{row['queries']} {status} "
              f"({row['cvc5_seconds']:.2f} s)")
        for d in row["disagreements"][:5]:
            print(f"    {d}")
    print(f"{report['queries']} queries: {'all agree' if report['all_agree'] else 'DISAGREEMENT'}")
    return 0 if report["all_agree"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
