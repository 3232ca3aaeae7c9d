"""What computing each observation inside its model turn's forward would gain and cost.

Store format 6 computes a model turn's header and reply in one prefill; the observation's
prompt blocks before it are a forward of their own. The one-forward-per-turn schedule would
join them (`merged_observations`): a turn whose recorded reply holds becomes one forward, but a
turn that decodes (no draft: every step of `unsee run`, every turn of B5) computes its
observation twice, once to draft and once in the reply's canonical prefill. This measures both
sides on the agent shape before anything is changed: the session is run and stored as `unsee
run` stores it, each method forgets the target from its own copy in this process (nothing
resident: B7 reads its prefix from K/V pages), and the forget's own forwards are replayed back
to back, as recorded and as the merged schedule would run them, interleaved, only the model
calls timed. B5 replays every transition from R_0 as `unsee run` ran them, so its column is
also the live run's. Usage:

    .venv/bin/python scripts/merge_schedule.py [--model smollm2] [--T 32] [--repeats 3]
        [--attn sdpa] [--dtype float32] [--threads 1] [--json PATH] [--markdown PATH]
"""

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path

from unsee.impl.experiments.limit import forward_limit, merged_observations, store_agent_session
from unsee.impl.store.session import forget_stored
from unsee.impl.store.sqlite import Store

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--model", default="smollm2")
ap.add_argument("--T", type=int, default=32)
ap.add_argument("--repeats", type=int, default=3)
ap.add_argument("--attn", default="sdpa")
ap.add_argument("--dtype", default="float32")
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--json", type=Path)
ap.add_argument("--markdown", type=Path)
a = ap.parse_args()

doc = {"model": a.model, "T": a.T, "attn": a.attn, "dtype": a.dtype, "threads": a.threads, "repeats": a.repeats,
       "methods": {}}
with tempfile.TemporaryDirectory(prefix="unsee-merge-") as tmp:
    stored = Path(tmp) / "stored"
    doc["context_tokens"] = store_agent_session(stored, a.model, a.T, 8, a.attn, a.threads, a.dtype)["context_tokens"]
    for m in ("B5", "B7"):
        copy = Path(tmp) / m
        shutil.copytree(stored, copy)  # the store and its K/V pages
        store = Store(copy / "session.db")
        try:
            rt, receipt = forget_stored(store, ["z"], m)
        finally:
            store.close()
        merged = merged_observations(rt.last_trace.events)
        runs = {"recorded": [], "merged": []}
        for _ in range(a.repeats):  # interleaved, so that a slow spell falls on both schedules
            runs["recorded"].append(forward_limit(rt))
            runs["merged"].append(forward_limit(rt, merged))
        doc["methods"][m] = {"transitions": receipt["transitions"], **{
            k: {"forwards": rs[0]["forwards"], "tokens": rs[0]["tokens"],
                "seconds": statistics.median(r["seconds"] for r in rs),
                "seconds_range": [min(r["seconds"] for r in rs), max(r["seconds"] for r in rs)]}
            for k, rs in runs.items()}}
        print(f"{m}: {json.dumps(doc['methods'][m])}", flush=True)

rows = [f"# One forward per model turn, observation included: {a.model}, agent shape, T={a.T}",
        "",
        f"{doc['context_tokens']} tokens of context; {a.attn} attention, {a.dtype}, {a.threads} thread(s); "
        f"the target 12 turns from the end; the forget's forwards replayed {a.repeats}× per schedule, interleaved.",
        "",
        "| method | schedule | forwards | tokens | forwards s (median) | range |",
        "|---|---|---|---|---|---|"]
for m, d in doc["methods"].items():
    for k in ("recorded", "merged"):
        r = d[k]
        rows.append(f"| {m} ({d['transitions']} transitions) | {k} | {r['forwards']} | {r['tokens']:,} | "
                    f"{r['seconds']:.2f} | {r['seconds_range'][0]:.2f}–{r['seconds_range'][1]:.2f} |")
gain = {m: d["recorded"]["seconds"] / d["merged"]["seconds"] for m, d in doc["methods"].items()}
doc["recorded_over_merged"] = gain
rows += ["", "recorded ÷ merged seconds: " + ", ".join(f"{m} {g:.3f}×" for m, g in gain.items())
         + " (above 1: the merged schedule is faster)."]
text = "\n".join(rows) + "\n"
print(text)
if a.json:
    a.json.write_text(json.dumps(doc, indent=1) + "\n")
if a.markdown:
    a.markdown.write_text(text)
