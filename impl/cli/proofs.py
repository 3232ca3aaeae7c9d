"""`unsee prove` and `unsee verify`: the obligations, their certificates, and random sessions through an engine."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from unsee.impl.cli.common import app, console, out, progress, write_json


@app.command()
def prove(max_steps: int = typer.Option(16, help="Bounded obligations check every T up to this."),
          json_path: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON here."),
          emit: Optional[Path] = typer.Option(None, "--emit", help="Also write every SMT query as SMT-LIB 2 here, with "
                                              "its expected answer and recheck.py, and re-check them all with cvc5."),
          code: bool = typer.Option(False, "--code", help="Instead of the Z3 obligations, run CrossHair on the "
                                    "functions of unsee.model under their contracts, each with a broken copy."),
          budget: float = typer.Option(60.0, help="With --code: CPU seconds per contract at most (a ceiling; "
                                       "each contract's path cap is the budget a normal run uses)."),
          paths: Optional[int] = typer.Option(None, help="With --code: explore at most this many paths per contract "
                                              "instead of each contract's own cap (0: no cap, only --budget)."),
          jobs: int = typer.Option(2, help="Processes to spread the obligations (with --code: the contracts) over; "
                                   "each query is still solved in a fresh Z3 context.")) -> None:
    """Discharge every Z3 obligation and report each: proved, counterexample or unknown.

    Unknown fails. Each row is labelled by its kind (validity, existence, checked on samples,
    encoding check) and tied to the functions of unsee.model it abstracts (each checked on every
    small input). With --emit, re-check every query with cvc5: a disagreement or an unknown
    fails. With --code, check the code itself: exhausted, no counterexample or counterexample; a
    broken copy must be refuted."""
    if code:
        _prove_code(json_path, budget, paths, jobs)
        return
    from rich.markup import escape

    from unsee.proofs.obligations import ENCODING_CHECKS, OBLIGATIONS, REFUTED, run_all

    if max_steps < 1:
        raise typer.BadParameter("--max-steps must be at least 1")
    with progress() as p:
        task = p.add_task("proving", total=len(OBLIGATIONS) + len(ENCODING_CHECKS) + (len(REFUTED) if emit else 0))
        doc = run_all(max_steps, on_result=lambda r: p.advance(task), record=emit is not None, jobs=jobs)
    table = Table(title="code ties: each function of unsee.model against the facts the obligations assume of it")
    for col in ("tie", "result", "inputs", "seconds", "functions", "bounds"):
        table.add_column(col, overflow="fold")
    for t in doc["ties"]:
        color = "green" if t["result"] == "exhausted" else "red"
        table.add_row(t["name"], f"[{color}]{t['result']}[/{color}]", str(t["inputs"]), f"{t['seconds']:.3f}",
                      ", ".join(f.rsplit(".", 1)[-1] for f in t["functions"]), escape(t["bounds"]))
    out.print(table)
    for key, title in (("obligations", f"Z3 obligations (--max-steps {max_steps}; the bounds each one used)"),
                       ("encoding_checks", "encoding checks (hold by construction; not counted as proofs)")):
        table = Table(title=title)
        for col in ("check" if key == "encoding_checks" else "obligation", "kind", "result", "seconds", "bounds",
                    "ties", "statement"):
            table.add_column(col, overflow="fold")
        for o in doc[key]:
            color = "green" if o["result"] == "proved" else "red"
            # what "proved" establishes depends on the kind: a witness, or the samples only
            shown = {"existence": "witness found", "checked on samples": "holds on samples"}.get(o["kind"], "proved")
            shown = shown if o["result"] == "proved" else o["result"]
            table.add_row(o["name"], o["kind"], f"[{color}]{shown}[/{color}]", f"{o['seconds']:.3f}",
                          escape(o["bounds"]), ", ".join(a["tie"] for a in o["abstracts"]) or "—",
                          escape(o["statement"]))
        out.print(table)
    failed = not doc["all_proved"]
    if emit is not None:
        failed |= _recheck_certificates(doc, emit)
    write_json(doc, json_path)
    if failed:
        for t in doc["ties"]:
            if t["result"] != "exhausted":
                console.print(f"[red]tie {t['name']}: {t['result']}[/red] {escape(t.get('counterexample', ''))}")
        for o in doc["obligations"]:
            if o["result"] != "proved":
                console.print(f"[red]{o['name']}: {o['result']}[/red] {escape(o.get('detail', ''))}\n"
                              f"{escape(o.get('model', ''))}")
        raise typer.Exit(1)


def _recheck_certificates(doc: dict, folder: Path) -> bool:
    """`prove --emit`: write the SMT-LIB certificates and re-check each with cvc5; True on any failure.
    The queries leave `doc` (they are in the folder) and the re-check's report enters it."""
    from unsee.proofs.certificates import emit, recheck

    index = emit(doc, folder)
    del doc["queries"]
    with progress() as p:
        task = p.add_task("cvc5", total=len(index))
        report = recheck(folder, index, on_query=lambda e: p.advance(task))
    doc["certificates"] = {"folder": str(folder), **report}
    wrong = [r for r in doc.get("refuted", ()) if r["result"] != "counterexample"]
    table = Table(title=f"certificates: {report['queries']} SMT-LIB queries in {folder}, re-checked by cvc5")
    for col in ("row", "group", "queries", "cvc5 agrees", "cvc5 seconds"):
        table.add_column(col, overflow="fold")
    for r in report["rows"]:
        color = "green" if not r["disagreements"] else "red"
        table.add_row(r["row"], r["group"], str(r["queries"]), f"[{color}]{r['agree']}/{r['queries']}[/{color}]",
                      f"{r['cvc5_seconds']:.2f}")
    out.print(table)
    for r in report["rows"]:
        for d in r["disagreements"][:3]:
            console.print(f"[red]{r['row']}: {d['file']}: expected {d['expected']}, z3 {d['z3']}, cvc5 {d['cvc5']}[/red]")
    for r in wrong:
        console.print(f"[red]{r['name']}: a deliberately false statement came back {r['result']}[/red]")
    return not report["all_agree"] or bool(wrong)


def _prove_code(json_path: Optional[Path], budget: float, paths: Optional[int], jobs: int) -> None:
    """`prove --code`: each function of unsee.model under its contract, and its broken copy."""
    from rich.markup import escape

    from unsee.proofs.code import COUNTEREXAMPLE, EXHAUSTED, NO_COUNTEREXAMPLE, PROOFS, run_all

    if budget <= 0:
        raise typer.BadParameter("--budget must be positive")
    if paths is not None and paths < 0:
        raise typer.BadParameter("--paths must be at least 0")
    if jobs < 1:
        raise typer.BadParameter("--jobs must be at least 1")
    with progress() as p:
        task = p.add_task("CrossHair", total=len(PROOFS))
        doc = run_all(budget, paths, jobs, on_result=lambda r: p.advance(task))
    doc["paths_override"] = paths
    colors = {EXHAUSTED: "green", NO_COUNTEREXAMPLE: "yellow"}
    cap_words = "each contract's path cap" if paths is None else f"at most {paths} paths" if paths else "no path cap"
    table = Table(title=f"CrossHair on unsee.model ({cap_words}, at most {budget:g} CPU s per contract)")
    for col in ("function", "result", "paths", "seconds", "broken copy", "paths ", "seconds "):
        table.add_column(col, justify="left" if col in ("function", "result", "broken copy") else "right", overflow="fold")
    for f in doc["functions"]:
        b = f["broken"]
        real_color = colors.get(f["result"], "red")
        broken_color = "green" if b["result"] == COUNTEREXAMPLE else "red"
        cap = f"/{f['path_cap']}" if f["path_cap"] else ""
        table.add_row(f["name"].rsplit(".", 1)[-1], f"[{real_color}]{f['result']}[/{real_color}]",
                      f"{f['paths']}{cap}", f"{f['seconds']:.1f}",
                      f"[{broken_color}]{'refuted' if b['result'] == COUNTEREXAMPLE else 'NOT refuted: ' + b['result']}[/{broken_color}]",
                      str(b["paths"]), f"{b['seconds']:.1f}")
    out.print(table)
    for f in doc["functions"]:
        out.print(f"[bold]{f['name']}[/bold] ({escape(f['bounds'])})\n  contract: {escape(f['contract'])}\n"
                  f"  broken copy: {escape(f['broken']['mutation'])}\n"
                  f"  its counterexample: {escape(f['broken'].get('counterexample', '—'))}", soft_wrap=True)
    write_json(doc, json_path)
    if not doc["all_ok"]:
        for f in doc["functions"]:
            if f["result"] not in (EXHAUSTED, NO_COUNTEREXAMPLE):
                console.print(f"[red]{f['name']}: {f['result']}[/red] {escape(f.get('counterexample', f['stopped']))}")
            if f["broken"]["result"] != COUNTEREXAMPLE:
                console.print(f"[red]{f['name']}: its broken copy was not refuted ({f['broken']['result']}, "
                              f"{f['broken']['stopped']}): the contract may be too weak[/red]")
        raise typer.Exit(1)


class VerifyEngine(str, Enum):
    reference = "reference"
    kv = "kv"
    stored = "stored"


def _reference_factory_for(cfg: dict):
    from unsee.model import Config
    from unsee.specs.reference import ReferenceRuntime

    def factory():
        return ReferenceRuntime(Config(sampling=cfg["sampling"], seed=cfg["seed"]), cfg["policy"])
    return factory


@app.command()
def verify(engine: VerifyEngine = typer.Option(VerifyEngine.reference, help="The runtime: the reference model, the "
                                               "KV engine, or a session store (every step and forget persisted, "
                                               "and what it persists checked too)."),
           model: str = typer.Option("tiny-llama", help="With --engine kv or stored: a model name or path (stored: "
                                     "`reference` too)."),
           examples: int = typer.Option(100, help="Random sessions to generate."),
           seed: int = typer.Option(0, help="Hypothesis seed."),
           max_ops: int = typer.Option(10, help="Longest program (observations and forgets)."),
           directed: bool = typer.Option(True, help="First run the directed programs (one per combination of "
                                         "where the statements' rules fall relative to tau, c* and T, and the "
                                         "shapes of the forget history, the parts and the checkpoint set; 76), so "
                                         "every coverage target is reached whatever the seed."),
           json_path: Optional[Path] = typer.Option(None, "--json", help="Write the report as JSON here.")) -> None:
    """Drive directed, then random sessions through an engine and check every statement at every forget."""
    from unsee.specs.harness import verify as run_verify

    if examples < 1:
        raise typer.BadParameter("--examples must be at least 1")
    if engine is VerifyEngine.reference:
        factory_for = _reference_factory_for
        label = "reference"
    elif engine is VerifyEngine.stored:
        from unsee.impl.store.kit import stored_factory_for

        factory_for = stored_factory_for(model)
        label = f"stored:{model}"
    else:
        from unsee.impl.engine.kv_runtime import kv_factory_for

        factory_for = kv_factory_for(model)
        label = f"kv:{model}"
    from unsee.specs.strategies import directed_programs

    total = examples + (len(directed_programs()) if directed else 0)
    with progress() as p:
        task = p.add_task(f"verify {label}", total=total)

        def tick(tally):
            p.update(task, completed=min(tally.examples, total),
                     description=f"verify {label}: {tally.forgets} forgets, {tally.exact} exact")
        doc = run_verify(factory_for, examples=examples, seed=seed, max_ops=max_ops, on_example=tick, engine=label,
                         directed=directed)
    table = Table(title=f"verify --engine {label}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for k in ("examples", "directed", "forgets", "exact", "optimal_invocations", "seconds"):
        table.add_row(k, str(doc[k]))
    table.add_row("failures", str(len(doc["failures"])))
    out.print(table)
    cov = Table(title="coverage (forgets per situation)")
    cov.add_column("situation")
    cov.add_column("forgets", justify="right")
    for k, v in doc["coverage"].items():
        cov.add_row(k, str(v))
    out.print(cov)
    if doc.get("seal"):
        seal = doc["seal"]
        out.print(f"seal: {seal['databases_edited']} databases edited column by column, {len(seal['refused'])} of "
                  f"{seal['columns']} columns edited and refused; never edited (their tables held no row): "
                  f"{', '.join(seal['never_edited']) or 'none'}")
    write_json(doc, json_path)
    if doc["failures"]:
        for f in doc["failures"]:
            console.print(f"[red]{f['statement']}[/red]: {f['message']}\nconfig {f['config']}")
            for line in f["trace"]:
                console.print(f"    {line}")
        raise typer.Exit(1)

