"""What a forget costs on each held-out production shape: B7 (fork at R_c, replay T−c turns)
against B5 (replay every turn), on tiny-llama and InMemorySaver, each forget on a fresh copy of
the same thread. Prints a Markdown table (and JSON with --json PATH):

    .venv/bin/python -m tests.integrations.shape_costs [--repeats 3] [--json out.json]

Times are wall seconds of `forget` (the receipt's `seconds`), the median of the repeats; the
transitions are the receipt's counts. Not a test: times are measured, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

from langgraph.checkpoint.memory import InMemorySaver

from unsee.impl.integrations import langgraph as L
from unsee.model.errors import UnseeError
from tests.integrations import heldout_production_agents as H


def one(shape: str, method: str) -> tuple[float, int, int]:
    builder, scenario = H.SHAPES[shape]
    graph, _llm, _ = builder(InMemorySaver())
    scenario(graph, "t1", True)
    r = L.forget(graph, "t1", [H.SECRET_ID], method=method)
    return r.seconds, r.transitions, r["T"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    rows = []
    for shape in H.SHAPES:
        try:
            b7 = [one(shape, "B7") for _ in range(a.repeats)]
        except UnseeError as e:  # refused (an approval asked inside a consequential tool)
            print(f"{shape}: refused ({str(e)[:90]}…)")
            continue
        b5 = [one(shape, "B5") for _ in range(a.repeats)]
        s7, s5 = statistics.median(x[0] for x in b7), statistics.median(x[0] for x in b5)
        rows.append({"shape": shape, "T": b7[0][2], "B7 transitions": b7[0][1], "B5 transitions": b5[0][1],
                     "B7 s": round(s7, 3), "B5 s": round(s5, 3), "B7/B5": round(s7 / s5, 3)})
    print(f"{a.repeats} repeats each, median; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores\n")
    print("| shape | T | B7 transitions | B5 transitions | B7 s | B5 s | B7/B5 |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(str(r[k]) for k in r) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
