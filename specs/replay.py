"""A kit failure as a file, and the one command that replays it against a runtime.

When the kit finds a statement that fails, it writes the shrunk session (the drawn config, the
observations and forget requests in order, what failed) to a JSON file and prints

    python -m unsee.specs.replay FILE [--unsee-runtime module:factory]

which drives the runtime through exactly that session under the kit's checks (`harness.execute`)
and prints where it fails, so an engineer debugs one session, not a Hypothesis trace. The runtime
defaults to the one the file was written for.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from unsee.specs.harness import Tally, execute
from unsee.specs.plugin import factory_for
from unsee.specs.strategies import program_of


def write_failure(failure: dict, runtime: str | None, where) -> Path:
    """The failure's session as a file under `where` (named by its content); returns its path."""
    doc = {"runtime": runtime, "config": failure.get("config"), "program": failure["program"],
           "statement": failure.get("statement"), "message": failure.get("message")}
    text = json.dumps(doc, indent=1, sort_keys=True)
    path = Path(where) / f"failure-{hashlib.sha256(text.encode()).hexdigest()[:12]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    return path


def command(path, runtime: str | None) -> str:
    return f"python -m unsee.specs.replay {path}" + (f" --unsee-runtime {runtime}" if runtime else "")


def replay(path, runtime: str | None = None) -> str | None:
    """Run the file's session on the runtime; the failure's message, or None if it passed."""
    doc = json.loads(Path(path).read_text())
    spec = runtime or doc.get("runtime")
    if not spec:
        raise SystemExit(f"{path} names no runtime: pass --unsee-runtime module:factory")
    cfg = doc.get("config") or {}
    try:
        execute(program_of(doc["program"]), factory_for(spec)(cfg), Tally(events=False), policy=cfg.get("policy"))
    except AssertionError as e:
        return f"{type(e).__name__}: {e}"
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m unsee.specs.replay", description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--unsee-runtime", dest="runtime", default=None, help="module:factory (default: the file's)")
    a = ap.parse_args(argv)
    msg = replay(a.file, a.runtime)
    if msg is None:
        print(f"{a.file}: the session passes every statement on this runtime")
        return 0
    print(f"{a.file}: {msg}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
