"""What a store shared by threads costs: the journal on a turn, and a cross-thread forget against
replaying every thread in full (B5). A script, not a test: times are reported, never asserted.

    .venv/bin/python -m tests.integrations.store_costs [--threads 6] [--turns 4] [--users 3] [--kind memory|sqlite]

Each of N threads (spread over U users) runs T turns on the memory agent of test_langgraph_store (a node that
searches the user's memories and saves a message that says "remember"); the secret is thread t1's
second turn. Reported: the mean seconds of a turn with the store journaled (a forgettable graph)
and without (the same graph not made forgettable), with the store calls per turn; then B7's and
B5's forget: transitions per thread, in total, and seconds.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import time

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from unsee.impl.integrations import langgraph as L
from tests.integrations.test_langgraph_store import SECRET, SID, cfg, memory_graph, say


def backing(kind, where):
    if kind == "memory":
        return InMemorySaver(), InMemoryStore()
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.store.sqlite import SqliteStore

    store = SqliteStore(sqlite3.connect(f"{where}-store.sqlite", check_same_thread=False, isolation_level=None))
    store.setup()
    return SqliteSaver(sqlite3.connect(f"{where}-cp.sqlite", check_same_thread=False)), store


def drive(graph, threads: int, turns: int, users: int) -> list[float]:
    """Every thread's turns, round-robin (threads interleave), thread u of user (u − 1) mod users + 1;
    the seconds of each invoke."""
    out = []
    for k in range(1, turns + 1):
        for u in range(1, threads + 1):
            if (u, k) == (1, 2):
                inp = {"messages": [L.source_message(SECRET, SID)]}
            elif k == 1:
                inp = say(f"remember: thread {u} likes item {u}")
            else:
                inp = say(f"what do you remember? ({u}.{k})")
            t0 = time.perf_counter()
            graph.invoke(inp, cfg(f"t{u}", f"u{(u - 1) % users + 1}"))
            out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=6)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--users", type=int, default=3, help="threads are spread over this many users")
    ap.add_argument("--kind", choices=["memory", "sqlite"], default="memory")
    ap.add_argument("--dir", default="/tmp/unsee-store-costs")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    for f in os.listdir(a.dir):
        os.remove(os.path.join(a.dir, f))
    llm = L.UnseeChatModel.from_model("tiny-llama")

    # the journal's cost on a turn: the same graph, not made forgettable
    saver, store = backing(a.kind, f"{a.dir}/plain")
    plain, _ = memory_graph(saver, store, llm, made_forgettable=False)
    t_plain = drive(plain, a.threads, a.turns, a.users)

    runs = {}
    for method in ("B7", "B5"):
        saver, store = backing(a.kind, f"{a.dir}/{method}")
        graph, _ = memory_graph(saver, store, llm)
        t_rec = drive(graph, a.threads, a.turns, a.users)
        ops = sum(1 for e in graph.store.journal.events() if e["e"] == "op")
        t0 = time.perf_counter()
        r = L.forget(graph, "t1", [SID], method=method)
        runs[method] = (r, time.perf_counter() - t0, t_rec, ops)

    n = a.threads * a.turns
    r7, s7, t_rec, ops = runs["B7"]
    print(f"{a.threads} threads × {a.turns} turns, {a.users} users ({a.kind} store and checkpointer), "
          f"load {os.getloadavg()[0]:.2f}")
    print(f"a turn: {statistics.mean(t_plain) * 1e3:.1f} ms without the journal, "
          f"{statistics.mean(t_rec) * 1e3:.1f} ms journaled ({ops / n:.1f} store calls a turn)")
    print("| method | threads replayed | transitions (per thread) | total | seconds |")
    print("|---|---|---|---|---|")
    for method in ("B7", "B5"):
        r, sec, _, _ = runs[method]
        per = {r.thread_id: r.transitions} | {x.thread_id: x.transitions for x in r.threads}
        print(f"| {method} | {len(per)} | {', '.join(f'{k}:{v}' for k, v in sorted(per.items()))} | "
              f"{sum(per.values())} | {sec:.2f} |")
    print(f"B5/B7: {sum([runs['B5'][0].transitions] + [x.transitions for x in runs['B5'][0].threads]) / max(1, sum([r7.transitions] + [x.transitions for x in r7.threads])):.2f}× transitions, "
          f"{runs['B5'][1] / s7:.2f}× seconds")


if __name__ == "__main__":
    main()
