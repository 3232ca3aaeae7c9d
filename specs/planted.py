"""The planted-bug matrix: which layer of evidence catches which mistake in `model/`.

Each bug is a patch (file, old text, new text) applied to a copy of the package in a
temporary folder; every layer then runs in a subprocess against that copy, and the matrix
says which layers caught the bug. A bug counts as caught by a layer only when the layer
exits with its own failure report (exit status 1, no Python traceback of the tool itself);
"missed" is a clean pass, "error" anything else. The clean copy must pass every layer first.

    python -m unsee.specs.planted                 # every bug, every layer: prints the matrix
    python -m unsee.specs.planted --bug first_entry_returns_last --layer kit --layer verify
    python -m unsee.specs.planted --json matrix.json

Layers are values (`Layer`): a name, a command run in the copy's root with the copy first on
PYTHONPATH, and a time limit. `LAYERS` is the default tuple; a layer is added by adding
to it (or passing `layers=` to `run_matrix`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

def source_tree() -> Path:
    """The source tree copies are made from (model/, specs/, proofs/, impl/, tests/): the checkout this
    module sits in (an editable install), else $UNSEE_SOURCE, else the current folder, when it is one
    (an installed wheel holds no tests/: run from the checkout, as CI does)."""
    here = Path(__file__).resolve().parent.parent
    for root in (here, Path(os.environ.get("UNSEE_SOURCE", here)), Path.cwd()):
        if (root / "tests").is_dir() and (root / "model").is_dir() and (root / "pyproject.toml").is_file():
            return root.resolve()
    return here


ROOT = source_tree()
PACKAGES = ("model", "specs", "proofs", "impl")  # copied (a patch may touch them); the weights are linked
LINKED = ("impl/organism/weights",)  # large files no patch touches


@dataclass(frozen=True)
class Bug:
    """One plausible mistake: `old` (which must occur exactly once in `file`) becomes `new`.
    changes_forget: the mistake changes what a B7 or B5 forget produces (state, log, receipt,
    side effects), so the kit's default run must catch it."""

    name: str
    file: str
    old: str
    new: str
    what: str
    changes_forget: bool = True


@dataclass(frozen=True)
class Layer:
    """One layer of evidence: `argv` run in the copy's root; exit status 1 means it caught the bug."""

    name: str
    argv: tuple[str, ...]
    timeout: float = 600.0


PY = sys.executable
FAST_TESTS = ("tests/model/test_oracle.py", "tests/specs/test_statements.py", "tests/model/test_reference_machine.py",
              "tests/specs/test_erasure.py", "tests/store/test_erasure.py", "tests/store/test_seal_coverage.py")

LAYERS: tuple[Layer, ...] = (
    Layer("kit", (PY, "-m", "pytest", "--pyargs", "unsee.specs.conformance",
                  "--unsee-runtime=unsee.specs.runtimes:reference", "-p", "no:cacheprovider", "-q", "-x")),
    Layer("verify", (PY, "-c", "from unsee.impl.cli import app; app()", "verify", "--engine", "reference",
                     "--examples", "40")),
    Layer("fast tests", (PY, "-m", "pytest", *FAST_TESTS, "-m", "not heavy and not slow", "-p", "no:cacheprovider",
                         "-q", "-x")),
    Layer("prove --code", (PY, "-c", "from unsee.impl.cli import app; app()", "prove", "--code")),
    Layer("prove", (PY, "-c", "from unsee.impl.cli import app; app()", "prove")),
    # the runtime over a session store (`unsee.impl.store.kit`): what it persists judged too (the
    # erasure statement, the seal obligation); the kit on the reference model, `unsee verify` on
    # tiny-llama, whose K/V pages the store keeps
    Layer("kit stored", (PY, "-m", "pytest", "--pyargs", "unsee.specs.conformance",
                         "--unsee-runtime=unsee.impl.store.kit:stored_reference", "-p", "no:cacheprovider", "-q",
                         "-x")),
    Layer("verify stored", (PY, "-c", "from unsee.impl.cli import app; app()", "verify", "--engine", "stored",
                            "--model", "tiny-llama", "--examples", "12", "--max-ops", "6")),
)

# Layers run only when named (`--layer traces`): the KV engine's trace validation on the tiny
# models needs torch and about a minute a bug.
EXTRA_LAYERS: tuple[Layer, ...] = (
    Layer("traces", (PY, "-m", "pytest", "tests/engine/test_traces.py", "-p", "no:cacheprovider", "-q", "-x")),
)

P, R, ST, L = "model/plan.py", "model/replay.py", "model/state.py", "impl/engine/reference.py"
SQ, DG = "impl/store/sqlite.py", "impl/store/digests.py"

BUGS: tuple[Bug, ...] = (
    # the nine of the review that asked for this matrix
    Bug("first_entry_returns_last", P, "first = min((by_id[a] for a in carriers), key=lambda a: a.turn)",
        "first = max((by_id[a] for a in carriers), key=lambda a: a.turn)", "first_entry returns the last entry"),
    Bug("taint_closure_one_hop", P, "out |= nx.descendants(graph, a)", "out |= set(graph.successors(a))",
        "taint_closure follows one hop (B7 uses suffix_closure: no forget changes)", changes_forget=False),
    Bug("choose_checkpoint_at_tau", P, "(c for c in checkpoints if c.boundary < tau)",
        "(c for c in checkpoints if c.boundary <= tau)", "choose_checkpoint accepts boundary ≤ τ"),
    Bug("choose_checkpoint_latest", P, "return max((c for c in checkpoints if c.boundary < tau), key=lambda c: c.boundary)",
        "return max(checkpoints, key=lambda c: c.boundary)", "the latest checkpoint regardless of τ"),
    Bug("restore_one_block_too_many", R,
        "tokens, kv = live.tokens[: c.token_offset], s.lm.crop(live.kv, c.token_offset)",
        "end = live.blocks[len(c.manifest)].end if len(live.blocks) > len(c.manifest) else c.token_offset\n"
        "        tokens, kv = live.tokens[:end], s.lm.crop(live.kv, end)", "restore keeps one block too many"),
    Bug("sanitize_keeps_instead_of_part", R, "return obs.without(frozenset(sources))",
        "z = frozenset(sources)\n    return replace(obs, parts=tuple(replace(p, instead_of=None) if p.instead_of in z else p "
        "for p in obs.parts if p.source not in z or p.instead_of is not None))",
        "sanitize keeps a z-sourced instead_of part"),
    Bug("without_keeps_instead_of_part", ST, "for p in self.parts if p.source not in sources)",
        "for p in self.parts if p.source not in sources or p.instead_of is not None)",
        "the same bug in Observation.without"),
    Bug("suffix_closure_one_parent", P, "if a.id not in out and any(p in out for p in a.parents):",
        "if a.id not in out and len(a.parents) == 1 and a.parents[0] in out:",
        "suffix_closure skips artifacts with several parents"),
    Bug("replay_tools_call_id_only", P, "if old is not None and old.tool == e.tool and old.args == e.args:",
        "if old is not None:", "replay_tools de-duplicates by call id only"),
    # more realistic mistakes
    Bug("locate_source_first_only", P, "    return found\n\n\ndef first_entry", "    return found[:1]\n\n\ndef first_entry",
        "locate_source returns only the first artifact of a source in several parts"),
    Bug("events_policy_forgets_compactions", R, 'return obs.kind == "memory" or bool(state.plan) or obs.compact',
        'return obs.kind == "memory" or bool(state.plan)', "the events policy skips the checkpoint before a compaction"),
    Bug("compensation_reasons_swapped", P, '"reason": "not committed" if old is None else "arguments differ"',
        '"reason": "arguments differ" if old is None else "not committed"', "replay_tools swaps the two reasons"),
    Bug("compensation_args_are_committed", P, '"args": arguments(e.args),\n',
        '"args": arguments(e.args) if old is None else arguments(old.args),\n',
        "a compensation entry gives the committed arguments as the counterfactual ones"),
    Bug("forget_fires_changed_calls", R, "t = replace(t, world=s.world, forgotten=",
        "t = replace(t, world=s.world + tuple(e for e in t.state.ledger if e.turn > boundary and e not in s.world), "
        "forgotten=", "the forget fires the counterfactual's calls whose arguments changed"),
    Bug("drafts_trusted_unchecked", L,
        "while k < n and next_token(kv, None if draw_list is None else draw_list[k]) == hint[k]:",
        "while k < n:", "the model takes every recorded reply it is handed as a draft unchecked"),
    Bug("restore_env_from_live_state", R, "env = dict(s.snapshots)[c.env_snapshot]", "env = s.state.env",
        "restore takes the environment from the live state, not the checkpoint's snapshot"),
    Bug("receipt_digests_before_forget", R, "layer_digests(new.state, s.lm),",
        "layer_digests(s.state, s.lm),", "the receipt digests the state before the forget"),
    Bug("suffix_closure_skips_next", P, "for a in artifacts[first + 1:]:", "for a in artifacts[first + 2:]:",
        "suffix_closure skips the artifact right after the first source artifact"),
    Bug("sanitize_drops_whole_observation", R, "return obs.without(frozenset(sources))",
        "return replace(obs, parts=()) if obs.sources & set(sources) else obs.without(frozenset(sources))",
        "sanitize drops every part of an observation that carries z"),
    Bug("without_reveals_every_instead_of", ST, "replace(p, instead_of=None) if p.instead_of in sources else p",
        "replace(p, instead_of=None) if p.instead_of is not None else p",
        "Observation.without shows every instead_of span, not only those of the forgotten sources"),
    # beyond the state (#53): what the store persists, what its seal covers, compensation at τ
    Bug("store_prefix_keeps_instead_of", SQ, "                    k = t - 1\n                    break",
        "                    break", "the store keeps the log before the splice verbatim: a part of the target "
        "standing instead of another source stays in the stored prefix (the state is right)", changes_forget=False),
    Bug("store_keeps_pages_after_splice", SQ, '("checkpoints", "boundary"), ("pages", "born")):',
        '("checkpoints", "boundary")):', "a forget leaves the K/V pages born after the splice point in the "
        "store's file", changes_forget=False),
    Bug("seal_leaves_out_a_column", DG, '"world": ("root", ("call_id", "tool", "args", "turn"), "call_id"),',
        '"world": ("root", ("call_id", "tool", "args"), "call_id"),', "the root digest leaves out the turn "
        "column of the side-effect ledger: an edit of it verifies", changes_forget=False),
    Bug("compensation_misses_tau", P, "for e in world if e.turn > boundary and e.call_id not in made]",
        "for e in world if e.turn > boundary + 1 and e.call_id not in made]", "compensation misses a call "
        "committed at τ = c+1 that the counterfactual never makes (no session of the reference F has one: its call "
        "at τ is planned at τ−1, as the twin's, and its arguments are always valid)", changes_forget=False),
    # held out (#53): written by a reviewer who had not read the set above, then kept
    Bug("page_digest_leaves_out_born", DG, 'f"|{page}|{born}|".encode()', 'f"|{page}|".encode()',
        "a K/V page's digest leaves out the turn it was born at: a page relabelled as born before the splice "
        "verifies, and a forget's deletion of the pages born after it passes it by", changes_forget=False),
    Bug("store_log_from_misses_the_splice_point", SQ, '"SELECT t, body FROM observations WHERE t <= ? ORDER BY t", (c,)',
        '"SELECT t, body FROM observations WHERE t < ? ORDER BY t", (c,)', "the store compares the kept log only "
        "before the splice point, so a forget's change to o_c itself (a hidden part of the target) is not "
        "written: the old o_c, the target's text included, stays in the stored log", changes_forget=False),
)


def make_copy(where: Path, bug: Bug | None) -> Path:
    """A copy of the package under `where` (src/unsee/... and tests/), with `bug` applied."""
    src = where / "src" / "unsee"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("")  # a regular package: found on PYTHONPATH before the editable install
    for name in PACKAGES:
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "weights"))
    for name in LINKED:
        (src / name).symlink_to(ROOT / name)
    shutil.copytree(ROOT / "tests", where / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", where / "pyproject.toml")
    if (ROOT / "docs").is_dir():
        (where / "docs").symlink_to(ROOT / "docs")
    if bug is not None:
        path = src / bug.file.split("/", 1)[0] / bug.file.split("/", 1)[1]
        text = path.read_text()
        if text.count(bug.old) != 1:
            raise ValueError(f"bug {bug.name}: the text to replace occurs {text.count(bug.old)} times in {bug.file} "
                             "(it must occur once: update the patch to the code)")
        path.write_text(text.replace(bug.old, bug.new))
    return where


def run_layer(layer: Layer, copy: Path) -> dict:
    """Run one layer in the copy: caught (exit 1, its own report), missed (exit 0) or error."""
    env = dict(os.environ, PYTHONPATH=str(copy / "src"), PYTHONDONTWRITEBYTECODE="1")
    env.pop("HYPOTHESIS_PROFILE", None)
    env.pop("UNSEE_WHEEL", None)  # the copy is what the layers must import, not an installed wheel
    t0 = time.perf_counter()
    try:
        p = subprocess.run(layer.argv, cwd=copy, env=env, capture_output=True, text=True, timeout=layer.timeout)
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = None, f"timed out after {layer.timeout} s\n{e.stdout or ''}"
    seconds = round(time.perf_counter() - t0, 1)
    tool_crashed = "Traceback (most recent call last)" in out and "pytest" not in layer.argv
    result = "missed" if rc == 0 else "caught" if rc == 1 and not tool_crashed else "error"
    return {"layer": layer.name, "result": result, "rc": rc, "seconds": seconds, "tail": out[-1500:]}


def run_matrix(bugs=BUGS, layers=None, on_row=None, jobs: int | None = None) -> dict:
    """The clean copy and every bug through every layer; returns the matrix document. The layers
    are separate processes, each in its own copy's root: `jobs` of them run at once (default: as
    many as there are cores, at most 4); on_row(row) as each copy's row completes, in order."""
    from concurrent.futures import ThreadPoolExecutor

    layers = list(LAYERS if layers is None else layers)
    jobs = jobs or max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))
    rows = []
    with tempfile.TemporaryDirectory(prefix="unsee-planted-") as tmp, ThreadPoolExecutor(jobs) as pool:
        copies = [(bug, make_copy(Path(tmp) / str(i), bug)) for i, bug in enumerate((None, *bugs))]
        runs = [(bug, {layer.name: pool.submit(run_layer, layer, copy) for layer in layers}) for bug, copy in copies]
        try:
            for bug, futures in runs:
                results = {name: f.result() for name, f in futures.items()}
                row = {"bug": "(none: the clean copy)" if bug is None else bug.name,
                       "what": "" if bug is None else bug.what,
                       "changes_forget": bug is not None and bug.changes_forget, "results": results,
                       "caught_by": sorted(k for k, v in results.items() if v["result"] == "caught")}
                rows.append(row)
                if on_row is not None:
                    on_row(row)
        except BaseException:  # Ctrl-C: no queued layer starts after it
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return {"layers": [layer.name for layer in layers], "clean": rows[0], "bugs": rows[1:]}


def problems(doc: dict, need: int = 2) -> list[str]:
    """What the matrix fails to show: the clean copy failing a layer, a bug caught by fewer than
    `need` layers, or a bug that changes a forget's result and escapes the kit's default run."""
    out = [f"the clean copy does not pass layer {k}: {v['result']}\n{v['tail']}"
           for k, v in doc["clean"]["results"].items() if v["result"] != "missed"]
    for row in doc["bugs"]:
        if len(row["caught_by"]) < need:
            out.append(f"{row['bug']} is caught by {row['caught_by'] or 'no layer'}, fewer than {need}")
        if row["changes_forget"] and "kit" in row["results"] and "kit" not in row["caught_by"]:
            out.append(f"{row['bug']} changes a forget's result, but the kit's default run "
                       f"{row['results']['kit']['result']} it")
    return out


def format_matrix(doc: dict) -> str:
    layers = doc["layers"]
    width = max(len(r["bug"]) for r in doc["bugs"] + [doc["clean"]])
    cols = [max(len(x), 7) for x in layers]
    lines = [" | ".join(["bug".ljust(width)] + [x.ljust(w) for x, w in zip(layers, cols)] + ["caught by"])]
    lines.append("-+-".join(["-" * width] + ["-" * w for w in cols] + ["-" * 9]))
    for row in [doc["clean"]] + doc["bugs"]:
        cells = [row["results"][x]["result"].ljust(w) for x, w in zip(layers, cols)]
        lines.append(" | ".join([row["bug"].ljust(width)] + cells + [str(len(row["caught_by"]))]))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m unsee.specs.planted", description=__doc__.split("\n\n")[0])
    ap.add_argument("--bug", action="append", help="run only this bug (repeatable)")
    ap.add_argument("--layer", action="append", help="run only this layer (repeatable)")
    ap.add_argument("--json", help="write the matrix document here")
    ap.add_argument("--list", action="store_true", help="list the bugs and layers and exit")
    a = ap.parse_args(argv)
    if a.list:
        for b in BUGS:
            print(f"{b.name}: {b.what} ({b.file}{'' if b.changes_forget else '; no forget changes'})")
        print("layers:", ", ".join(x.name for x in LAYERS), "; when named:", ", ".join(x.name for x in EXTRA_LAYERS))
        return 0
    bugs = [b for b in BUGS if not a.bug or b.name in a.bug]
    layers = [x for x in LAYERS + EXTRA_LAYERS if (x.name in a.layer if a.layer else x in LAYERS)]
    unknown = set(a.bug or ()) - {b.name for b in BUGS} | set(a.layer or ()) - {x.name for x in LAYERS + EXTRA_LAYERS}
    if unknown:
        ap.error(f"unknown bug or layer: {sorted(unknown)} (see --list)")
    doc = run_matrix(bugs, layers, on_row=lambda r: print(f"{r['bug']}: caught by {r['caught_by']}", flush=True))
    print(format_matrix(doc))
    if a.json:
        Path(a.json).write_text(json.dumps(doc, indent=1))
    bad = problems(doc)
    for p in bad:
        print("PROBLEM:", p)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
