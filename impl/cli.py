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


def main() -> None:  # pragma: no cover
    app(prog_name="unsee")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
