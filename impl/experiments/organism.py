"""An organism's model card: its measurements (`unsee.impl.organism.evaluate`), the leak audit
on it (`unsee.impl.experiments.audit`), and the card written from both (`unsee.impl.organism.card`).

    python -m unsee.impl.experiments.organism [--model recall-tiny] [--episodes N] [--audit N]
                                              [--json PATH] [--card PATH]

The audit runs on the memory and preference suites: leakage, Leak@probes and Leak@5 per forget
method. It lives here, above the organism, because the audit's cases draw on the organism's data.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from unsee.impl.engine.models import ORGANISMS
from unsee.impl.experiments.audit import run_audit
from unsee.impl.organism.card import card
from unsee.impl.organism.evaluate import NAME, copy_probe, evaluate


def audits(model: str, n: int, methods=("B0", "B1", "B2", "B3", "B5", "B7", "B8")) -> dict:
    """The card's audit figures per suite and method."""
    out = {}
    for suite in ("memory", "preference"):
        doc = run_audit(model, suite, n, list(methods), seed=0)
        keep = ("exact_leak", "action_leak", "any_leak", "leak_at_probes", "leak_at_5", "divergence_kl", "avoid_rate")
        out[suite] = {m: {k: d.get(k) for k in keep} | {"probes": d["probes"]} for m, d in doc["methods"].items()}
    return out


def measure(model: str = NAME, episodes: int = 60, audit_n: int = 6, copy_n: int = 0, long_n: int = 0,
            long_open_n: int = 0) -> dict:
    """What the card is written from: `evaluate`'s measurements, then the audit (`audit_n` episodes
    per suite; 0 skips it)."""
    doc = evaluate(model, episodes, copy_n, long_n, long_open_n)
    if audit_n:
        t1 = time.perf_counter()
        doc["audit"] = audits(model, audit_n)
        doc["audit_n"] = audit_n
        doc["audit_seconds"] = round(time.perf_counter() - t1, 1)
    return doc


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=NAME)
    ap.add_argument("--episodes", type=int, default=60)
    ap.add_argument("--audit", type=int, default=6, help="audit episodes per suite (0: skip the audit)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--card", type=Path, help="write the model card here")
    ap.add_argument("--copy-probe", type=int, default=0, metavar="N",
                    help="only probe copying (N draws per kind of value and mode; see copy_probe) and print it")
    ap.add_argument("--copy", type=int, default=0, metavar="N", help="also probe copying, N draws each, for the card")
    ap.add_argument("--long", type=int, default=0, metavar="N",
                    help="also N held-out transcripts of the long tool channel (AgentDojo's lengths), for the card")
    ap.add_argument("--long-open", type=int, default=0, metavar="N",
                    help="also N held-out long tool transcripts whose identifiers are in no vocabulary of the generator")
    args = ap.parse_args(argv)
    if args.copy_probe:
        print(json.dumps({"model": args.model, "copy": copy_probe(args.model, args.copy_probe)}, indent=1))
        return
    doc = measure(args.model, args.episodes, args.audit, args.copy, args.long, args.long_open)
    text = json.dumps(doc, indent=1)
    if args.json:
        args.json.write_text(text + "\n")
    else:
        print(text)
    if args.card:
        tr = (ORGANISMS[args.model] if args.model in ORGANISMS else Path(args.model)) / "training.json"
        training = json.loads(tr.read_text()) if tr.exists() else {}
        args.card.write_text(card(doc, training, args.model))


if __name__ == "__main__":
    main()
