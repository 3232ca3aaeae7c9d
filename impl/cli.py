"""The `unsee` command line. Heavy imports (torch, transformers) happen inside commands."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Exact execution-state unlearning for stateful LLM agents, and the proofs that it is exact.")
console = Console(stderr=True)
out = Console()


def _write_json(doc: dict, path: Optional[Path]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        console.print(f"[dim]wrote {path}[/dim]")


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=False)


@app.command()
def prove(max_steps: int = typer.Option(16, help="Bounded obligations check every T up to this."),
          json_path: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON here.")) -> None:
    """Discharge every Z3 obligation: proved, counterexample or unknown (unknown fails)."""
    from unsee.proofs.obligations import OBLIGATIONS, run_all

    if max_steps < 1:
        raise typer.BadParameter("--max-steps must be at least 1")
    table = Table(title=f"Z3 obligations (T ≤ {max_steps})")
    for col in ("obligation", "result", "seconds", "statement"):
        table.add_column(col, overflow="fold")
    with _progress() as p:
        task = p.add_task("proving", total=len(OBLIGATIONS))
        doc = run_all(max_steps, on_result=lambda r: p.advance(task))
    for o in doc["obligations"]:
        color = "green" if o["result"] == "proved" else "red"
        table.add_row(o["name"], f"[{color}]{o['result']}[/{color}]", f"{o['seconds']:.3f}", o["statement"])
    out.print(table)
    _write_json(doc, json_path)
    if not doc["all_proved"]:
        for o in doc["obligations"]:
            if o["result"] != "proved":
                console.print(f"[red]{o['name']}: {o['result']}[/red] {o.get('detail', '')}\n{o.get('model', '')}")
        raise typer.Exit(1)


def _reference_factory_for(cfg: dict):
    from unsee.model import Config, ReferenceRuntime

    def factory():
        return ReferenceRuntime(Config(sampling=cfg["sampling"], seed=cfg["seed"]), cfg["policy"])
    return factory


@app.command()
def verify(engine: str = typer.Option("reference", help="reference | kv"),
           model: str = typer.Option("tiny-llama", help="With --engine kv: a model name or path."),
           examples: int = typer.Option(100, help="Random sessions to generate."),
           seed: int = typer.Option(0, help="Hypothesis seed."),
           max_ops: int = typer.Option(10, help="Longest program (observations and forgets)."),
           json_path: Optional[Path] = typer.Option(None, "--json", help="Write the report as JSON here.")) -> None:
    """Drive random sessions through an engine and check every statement at every forget."""
    from unsee.specs.harness import verify as run_verify

    if examples < 1:
        raise typer.BadParameter("--examples must be at least 1")
    if engine == "reference":
        factory_for = _reference_factory_for
        label = "reference"
    elif engine == "kv":
        from unsee.impl.agent import kv_factory_for

        factory_for = kv_factory_for(model)
        label = f"kv:{model}"
    else:
        raise typer.BadParameter(f"unknown engine {engine!r}; use 'reference' or 'kv'")
    with _progress() as p:
        task = p.add_task(f"verify {label}", total=examples)

        def tick(tally):
            p.update(task, completed=min(tally.examples, examples),
                     description=f"verify {label}: {tally.forgets} forgets, {tally.exact} exact")
        doc = run_verify(factory_for, examples=examples, seed=seed, max_ops=max_ops, on_example=tick, engine=label)
    table = Table(title=f"verify --engine {label}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for k in ("examples", "forgets", "exact", "optimal_invocations", "seconds"):
        table.add_row(k, str(doc[k]))
    table.add_row("failures", str(len(doc["failures"])))
    out.print(table)
    cov = Table(title="coverage (forgets per situation)")
    cov.add_column("situation")
    cov.add_column("forgets", justify="right")
    for k, v in doc["coverage"].items():
        cov.add_row(k, str(v))
    out.print(cov)
    _write_json(doc, json_path)
    if doc["failures"]:
        for f in doc["failures"]:
            console.print(f"[red]{f['statement']}[/red]: {f['message']}\nconfig {f['config']}")
            for line in f["trace"]:
                console.print(f"    {line}")
        raise typer.Exit(1)


def _fail(e: Exception, code: int = 2) -> None:
    console.print(f"[red]error:[/red] {e}")
    raise typer.Exit(code)


@app.command()
def run(episode: Path = typer.Argument(..., help="Episode file: one JSON observation per line."),
        db: Path = typer.Option(..., help="SQLite session store to create."),
        model: str = typer.Option("tiny-llama", help="tiny-llama | tiny-qwen2 | tiny-mistral | smollm2 | reference | a path."),
        max_new_tokens: int = typer.Option(8, help="Reply length for user lines that do not say."),
        seed: Optional[int] = typer.Option(None, help="Sample with this seed (default: greedy decoding)."),
        policy: str = typer.Option("every", help="Checkpoint policy: every | events | start.")) -> None:
    """Run a session from an episode file and store it."""
    from unsee.impl.agent import make_runtime
    from unsee.impl.episode import parse_episode
    from unsee.impl.store import Store
    from unsee.model import Config, UnseeError

    try:
        stream = parse_episode(episode, max_new_tokens)  # every line is checked before anything is written
        if db.exists() and Store(db).has_session():
            raise UnseeError(f"{db} already holds a session; forget from it or pick a new --db path")
        rt = make_runtime(model, Config(sampling=seed is not None, seed=seed), policy)
    except (UnseeError, ValueError) as e:
        _fail(e)
    with _progress() as p:
        task = p.add_task(f"run {episode.name} on {model}", total=len(stream))
        for obs in stream:
            rt.step(obs)
            p.advance(task)
    store = Store(db, create=True)
    store.save(rt.session, model, dict(rt.digest()))
    out.print(f"stored T={rt.session.T} transitions, {len(rt.session.checkpoints)} checkpoints, "
              f"{len(rt.session.state.artifacts)} artifacts in {db}")


@app.command()
def forget(db: Path = typer.Option(..., help="The session store."),
           source: list[str] = typer.Option(..., help="Source id to forget (repeatable)."),
           method: str = typer.Option("B7", help="B7 (selective replay) or B5 (full reset)."),
           json_path: Optional[Path] = typer.Option(None, "--json", help="Write the receipt here.")) -> None:
    """Forget sources from a stored session and write the receipt."""
    from unsee.impl.agent import open_runtime, receipt_json
    from unsee.impl.store import Store
    from unsee.model import UnseeError

    if method not in ("B7", "B5"):
        _fail(ValueError(f"method must be B7 or B5, got {method!r}"))
    try:
        store = Store(db)
        rt = open_runtime(store)
        with console.status(f"forgetting {source} ({method})"):
            receipt = rt.forget(list(source), method=method)
    except (UnseeError, ValueError) as e:
        _fail(e)
    doc = receipt_json(receipt)
    store.save(rt.session, store.meta("model"), dict(rt.digest()), doc)
    table = Table(title=f"receipt: forget {', '.join(source)} ({method})")
    table.add_column("field")
    table.add_column("value", justify="right")
    for k in ("tau", "T", "checkpoint", "transitions", "tokens_prefilled", "tokens_decoded",
              "tokens_rematerialized", "seconds"):
        table.add_row(k, str(doc[k]))
    table.add_row("compensation", str(len(doc["compensation"])))
    out.print(table)
    for c in doc["compensation"]:
        console.print(f"[yellow]needs compensation[/yellow] {c['call_id']} ({c['tool']}): {c['reason']}")
    _write_json(doc, json_path)


@app.command()
def check(db: Path = typer.Option(..., help="The session store."),
          json_path: Optional[Path] = typer.Option(None, "--json", help="Write the report here.")) -> None:
    """Re-derive the state by a full reset from the stored log and compare every layer."""
    import json as _json

    from unsee.impl.agent import make_runtime, open_runtime
    from unsee.impl.store import Store
    from unsee.model import UnseeError, layer_digests

    try:
        store = Store(db)
        stored = open_runtime(store)
    except (UnseeError, ValueError) as e:
        _fail(e)
    s = stored.session
    fresh = make_runtime(store.meta("model"), s.config, s.policy)
    with _progress() as p:
        task = p.add_task("full reset from the log", total=s.T)
        for obs in s.observations:
            fresh.step(obs)
            p.advance(task)
    want = _json.loads(store.meta("digests"))
    got = dict(fresh.digest())
    mismatches = [{"layer": k, "t": s.T, "stored": want.get(k), "derived": got.get(k)}
                  for k in sorted(set(want) | set(got)) if want.get(k) != got.get(k)]
    for t, (a, b) in enumerate(zip(s.states, fresh.session.states)):
        da, db_ = layer_digests(a), layer_digests(b)
        for k in da:
            if k != "kv" and da[k] != db_[k]:
                mismatches.append({"layer": k, "t": t})
    doc = {"exact": not mismatches, "T": s.T, "mismatches": mismatches}
    out.print(f"[{'green' if doc['exact'] else 'red'}]exact={doc['exact']}[/] T={s.T}, "
              f"{len(mismatches)} mismatching layers")
    for m in mismatches[:20]:
        console.print(f"  layer {m['layer']} differs at t={m['t']}")
    _write_json(doc, json_path)
    if mismatches:
        raise typer.Exit(1)


@app.command()
def demo(model: str = typer.Option("smollm2", help="Model to run the story on."),
         json_path: Optional[Path] = typer.Option(None, "--json", help="Write the outcome here.")) -> None:
    """A two-minute story: reveal an address, derive from it, revoke it, forget it exactly."""
    from unsee.impl.demo import run_demo

    doc = run_demo(model, out)
    _write_json(doc, json_path)
    if not (doc["exact"] and doc["optimal"]):
        raise typer.Exit(1)


def main() -> None:  # pragma: no cover
    app(prog_name="unsee")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
