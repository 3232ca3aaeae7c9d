"""The `unsee` command line. Heavy imports (torch, transformers) happen inside commands."""

from __future__ import annotations

import json
import signal
import sqlite3
import sys
import time
from enum import Enum
from pathlib import Path
from typing import NoReturn, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

class Engine(str, Enum):
    reference = "reference"
    kv = "kv"


class Method(str, Enum):
    """Forget methods a stored session offers (the audit compares all of B0–B9)."""
    B7 = "B7"
    B5 = "B5"
    B5_prime = "B5'"


class Policy(str, Enum):
    every = "every"
    events = "events"
    start = "start"


class KvPages(str, Enum):
    keep = "keep"
    none = "none"


class Attn(str, Enum):
    auto = "auto"
    eager = "eager"
    sdpa = "sdpa"


class Dtype(str, Enum):
    float32 = "float32"
    bfloat16 = "bfloat16"


class Shape(str, Enum):
    short = "short"
    agent = "agent"


def _many(values: Optional[list[str]], default: str) -> list[str]:
    """A repeatable option; each value may also be comma-separated (the older spelling)."""
    return [x.strip() for v in (values or [default]) for x in v.split(",") if x.strip()]


def _args(args) -> str:
    """A call's decoded JSON arguments, as the user reads them."""
    return json.dumps(args, ensure_ascii=False)


app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Exact execution-state unlearning for stateful LLM agents, and the proofs that it is exact.")
console = Console(stderr=True)
out = Console()


def _write_json(doc: dict, path: Optional[Path]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        console.print(f"[dim]wrote {path}[/dim]")


class _Progress(Progress):
    """A progress bar on a terminal; elsewhere (a log, CI, a pipe), where rich draws nothing until
    the end, a plain line at most every `every` seconds and at completion."""

    def __init__(self, every: float) -> None:
        super().__init__(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                         console=console, transient=False)
        self.every, self.last = every, float("-inf")

    def update(self, task_id, **kw) -> None:
        super().update(task_id, **kw)
        self._line(task_id)

    def advance(self, task_id, advance: float = 1) -> None:
        super().advance(task_id, advance)
        self._line(task_id)

    def _line(self, task_id) -> None:
        if self.console.is_terminal:
            return
        task = next(t for t in self.tasks if t.id == task_id)
        now = time.monotonic()
        if now - self.last >= self.every or (task.total is not None and task.completed >= task.total):
            self.last = now
            total = "" if task.total is None else f"/{task.total:g}"
            self.console.print(f"{task.description} {task.completed:g}{total} ({task.elapsed or 0:.0f} s)",
                               highlight=False)


def _progress(every: float = 30.0) -> Progress:
    return _Progress(every)


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
          jobs: int = typer.Option(2, help="With --code: processes to spread the contracts over.")) -> None:
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
    with _progress() as p:
        task = p.add_task("proving", total=len(OBLIGATIONS) + len(ENCODING_CHECKS) + (len(REFUTED) if emit else 0))
        doc = run_all(max_steps, on_result=lambda r: p.advance(task), record=emit is not None)
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
    _write_json(doc, json_path)
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
    with _progress() as p:
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
    with _progress() as p:
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
    _write_json(doc, json_path)
    if not doc["all_ok"]:
        for f in doc["functions"]:
            if f["result"] not in (EXHAUSTED, NO_COUNTEREXAMPLE):
                console.print(f"[red]{f['name']}: {f['result']}[/red] {escape(f.get('counterexample', f['stopped']))}")
            if f["broken"]["result"] != COUNTEREXAMPLE:
                console.print(f"[red]{f['name']}: its broken copy was not refuted ({f['broken']['result']}, "
                              f"{f['broken']['stopped']}): the contract may be too weak[/red]")
        raise typer.Exit(1)


def _reference_factory_for(cfg: dict):
    from unsee.model import Config, ReferenceRuntime

    def factory():
        return ReferenceRuntime(Config(sampling=cfg["sampling"], seed=cfg["seed"]), cfg["policy"])
    return factory


@app.command()
def verify(engine: Engine = typer.Option(Engine.reference, help="The runtime: the reference model or the KV engine."),
           model: str = typer.Option("tiny-llama", help="With --engine kv: a model name or path."),
           examples: int = typer.Option(100, help="Random sessions to generate."),
           seed: int = typer.Option(0, help="Hypothesis seed."),
           max_ops: int = typer.Option(10, help="Longest program (observations and forgets)."),
           json_path: Optional[Path] = typer.Option(None, "--json", help="Write the report as JSON here.")) -> None:
    """Drive random sessions through an engine and check every statement at every forget."""
    from unsee.specs.harness import verify as run_verify

    if examples < 1:
        raise typer.BadParameter("--examples must be at least 1")
    if engine is Engine.reference:
        factory_for = _reference_factory_for
        label = "reference"
    else:
        from unsee.impl.engine.runtime import kv_factory_for

        factory_for = kv_factory_for(model)
        label = f"kv:{model}"
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


def _fail(e: Exception, code: int = 2) -> NoReturn:
    console.print(f"[red]error:[/red] {e}", soft_wrap=True)
    raise typer.Exit(code)


@app.command()
def run(episode: Path = typer.Argument(..., help="Episode file: one JSON observation per line."),
        db: Path = typer.Option(..., help="SQLite session store to create."),
        model: str = typer.Option("tiny-llama", help="tiny-llama | tiny-qwen2 | tiny-mistral | recall-tiny | "
                                                    "recall-tiny-2 | recall-tiny-3 | smollm2 | reference | a path."),
        max_new_tokens: int = typer.Option(8, help="Reply length for user lines that do not say."),
        seed: Optional[int] = typer.Option(None, help="Sample with this seed (default: greedy decoding)."),
        policy: Policy = typer.Option(Policy.every, help="Checkpoint policy."),
        kv_pages: KvPages = typer.Option(KvPages.keep, help="keep: persist every block's K/V rows so that a forget "
                                     "restores its checkpoint by reading them; none: re-materialize instead."),
        attn: Attn = typer.Option(Attn.auto, help="Attention kernel (part of the state: every later forget runs "
                                  "under it). auto: of eager and sdpa, those whose premise self-test holds here, the "
                                  "faster on a long block and short forwards after it, measured once per model and "
                                  "machine."),
        dtype: Dtype = typer.Option(Dtype.float32, help="Weights and cache dtype (bfloat16: other numerics than "
                                    "float32, so other replies; faster only where the CPU has bfloat16 kernels)."),
        threads: int = typer.Option(1, min=1, help="CPU threads of every forward (part of the state, like the "
                                    "kernel: more threads split the reductions differently).")) -> None:
    """Run a session from an episode file and store it."""
    from unsee.impl.store.episode import parse_episode
    from unsee.impl.store.session import Agent
    from unsee.model import Config, UnseeError

    try:
        stream, tools = parse_episode(episode, max_new_tokens)  # every line is checked before anything is written
        settings = {} if model == "reference" else {"dtype": dtype.value, "threads": threads, "attn": attn.value}
        with _progress() as p:
            task = p.add_task(f"run {episode.name} on {model}", total=len(stream))
            agent = Agent.create(db, model, Config(sampling=seed is not None, seed=seed, tools=tools), policy.value,
                                 kv_pages=kv_pages is KvPages.keep, observations=stream,
                                 on_step=lambda: p.advance(task), **settings)
    except (UnseeError, ValueError) as e:
        _fail(e)
    with agent:
        s, store = agent.session, agent.store
        n_pages, page_bytes, page_tokens = store.page_bytes()
        identity = json.loads(store.meta("identity"))
        out.print(f"stored T={s.T} transitions, {len(s.checkpoints)} checkpoints, {len(s.state.artifacts)} "
                  f"artifacts in {db}")
        if "weights_sha256" in identity:
            out.print(f"settings: {identity['dtype']}, {identity['attn']} attention, {identity['threads']} thread(s) "
                      f"on {identity['device']} (every later forget and check runs under these)")
            if agent.settings_note:
                out.print(f"attention: {agent.settings_note}")
        if n_pages:
            out.print(f"K/V pages: {n_pages} blocks, {page_tokens} tokens, {page_bytes / 1e6:.1f} MB "
                      f"({page_bytes / page_tokens / 1e3:.1f} KB per token); capture "
                      f"{1000 * agent.runtime.model.capture_seconds / max(1, s.T):.2f} ms per step")


@app.command()
def forget(db: Path = typer.Option(..., help="The session store."),
           source: list[str] = typer.Option(..., help="Source id to forget (repeatable)."),
           method: Method = typer.Option(Method.B7, help="B7 (selective replay), B5 (full reset) or B5' (full "
                                         "reset with the stored cache as a prefix cache)."),
           model: Optional[str] = typer.Option(None, help="Refuse unless the store was run on this model."),
           json_path: Optional[Path] = typer.Option(None, "--json", help="Write the receipt here.")) -> None:
    """Forget sources from a stored session and write the receipt (atomically)."""
    from unsee.impl.store.session import forget_stored
    from unsee.impl.store.sqlite import Store
    from unsee.model import UnseeError

    method = method.value
    store = None
    try:
        store = Store(db)
        if store.recovered:
            console.print(f"[yellow]{store.recovered}[/yellow]")
        with console.status(f"forgetting {len(source)} source(s) ({method}) from {db}"):
            rt, doc = forget_stored(store, list(source), method, model=model)
    except (UnseeError, ValueError) as e:
        _fail(e)
    except sqlite3.Error as e:
        _fail(UnseeError(f"{db}: {e}; the store holds the session as it was before this forget"))
    finally:
        if store is not None:
            store.close()
    table = Table(title=f"receipt: forget {len(source)} source(s) ({method})")
    table.add_column("field")
    table.add_column("value", justify="right")
    for k in ("tau", "T", "checkpoint", "transitions", "tokens_prefilled", "tokens_decoded", "tokens_verified",
              "tokens_restored", "tokens_reused", "tokens_rematerialized", "seconds", "import_seconds", "load_seconds", "open_seconds",
              "save_seconds"):
        table.add_row(k, str(doc[k]))
    table.add_row("compensation", str(len(doc["compensation"])))
    out.print(table)
    for c in doc["compensation"]:
        committed = "never fired" if c["committed"] is None else f"fired {c['tool']}({_args(c['committed'])})"
        twin = "makes no such call" if c["args"] is None else f"would call {c['tool']}({_args(c['args'])})"
        console.print(f"[yellow]needs compensation[/yellow] {c['call_id']}: {c['reason']}; {committed}, the twin "
                      f"{twin}", soft_wrap=True)
    if doc["pages_recomputed"]:
        console.print(f"[yellow]{len(doc['pages_recomputed'])} stored K/V page(s) failed their digest and were "
                      "recomputed from the verified tokens[/yellow] (counted in tokens_rematerialized)")
    trace = doc.get("trace")  # the engine's event log (a real model), checked against the spec
    if trace is not None:
        out.print(f"trace: {trace['events']} engine events, [green]allowed by the spec[/green]")
    _write_json(doc, json_path)


@app.command()
def check(db: Path = typer.Option(..., help="The session store."),
          fast: bool = typer.Option(False, "--fast", help="Verify every stored byte against its digest (K/V "
                                    "pages included) without the full reset."),
          json_path: Optional[Path] = typer.Option(None, "--json", help="Write the report here.")) -> None:
    """Verify the store's digests, then re-derive the state by a full reset and compare.

    The full reset runs from the stored log; every layer is compared."""
    from unsee.impl.store.session import check_store
    from unsee.impl.store.sqlite import Store
    from unsee.model import UnseeError

    store = None
    try:
        store = Store(db)
        if store.recovered:
            console.print(f"[yellow]{store.recovered}[/yellow]")
        if fast:
            doc = check_store(store, fast=True)
        else:
            with _progress() as p:
                task = p.add_task("full reset from the log", total=store.length())
                doc = check_store(store, on_step=lambda: p.advance(task))
    except (UnseeError, ValueError) as e:
        _fail(e)
    except sqlite3.Error as e:
        _fail(UnseeError(f"{db}: {e}"))
    finally:
        if store is not None:
            store.close()
    if fast:
        bad = doc["pages_damaged"]
        out.print(f"[green]verified[/green] T={doc['T']}: every row and {doc['pages'] - len(bad)} of {doc['pages']} "
                  "K/V pages match their digests (no full reset run; `unsee check` without --fast re-derives the state)")
        for page in bad[:20]:
            console.print(f"  [yellow]K/V page {page['key']} (born at turn {page['born']}) fails its digest[/yellow]: "
                          "a forget recomputes it from the verified tokens")
        _write_json(doc, json_path)
        if bad:
            raise typer.Exit(1)
        return
    mismatches = doc["mismatches"]
    out.print(f"[{'green' if doc['exact'] else 'red'}]exact={doc['exact']}[/] T={doc['T']}, "
              f"{len(mismatches)} mismatching layers")
    for m in mismatches[:20]:
        console.print(f"  layer {m['layer']} differs at t={m['t']}")
    _write_json(doc, json_path)
    if mismatches:
        raise typer.Exit(1)


@app.command()
def show(db: Path = typer.Option(..., help="The session store."),
         source: Optional[list[str]] = typer.Option(None, help="Mark what a forget of this source would touch "
                                                   "(repeatable): its artifacts, τ, I(z) and the checkpoint."),
         graph: Optional[Path] = typer.Option(None, help="Draw the provenance graph here (.png or .svg)."),
         json_path: Optional[Path] = typer.Option(None, "--json", help="Write the decoded session here.")) -> None:
    """The stored session as a person reads it, decoded to text.

    Each turn's observation with its source ids, the model's replies, memory, summaries, tool
    calls, side effects and receipts."""
    from unsee.impl.store.show import draw_graph, forget_plan, session_view
    from unsee.impl.store.sqlite import Store
    from unsee.model import UnseeError

    store = None
    try:
        store = Store(db)
        doc = session_view(store)
        if source:
            doc["forget_plan"] = forget_plan(store, list(source))
        if graph is not None:
            if graph.suffix not in (".png", ".svg"):
                raise UnseeError(f"--graph takes a .png or .svg path, got {graph}")
            doc["graph"] = draw_graph(store, graph, tuple(source or ()))
    except (UnseeError, ValueError) as e:
        _fail(e)
    finally:
        if store is not None:
            store.close()
    out.print(f"[bold]{db}[/bold]: {doc['model']}, T={doc['T']}, policy {doc['policy']}, "
              f"checkpoints at {doc['checkpoints']}")
    for t in doc["turns"]:
        parts = "  ".join(f"[cyan]\\[{p['source']}][/cyan] {p['text']}" for p in t["parts"]) or "[dim](empty)[/dim]"
        out.print(f"[bold]t={t['t']}[/bold] {t['kind']}: {parts}", soft_wrap=True)
        for r in t["replies"]:
            out.print(f"    [magenta]reply[/magenta] {r}", soft_wrap=True)
        for c in t["calls"]:
            out.print(f"    [blue]call[/blue] {c['tool']}({c['arguments']})", soft_wrap=True)
        for m in t["memory"]:
            out.print(f"    [yellow]memory[/yellow] {m['text']}", soft_wrap=True)
        if t["summary"] is not None:
            out.print(f"    [green]summary[/green] {t['summary']}", soft_wrap=True)
        for c in t["pending_calls"]:
            out.print(f"    [blue]planned[/blue] {c['call_id']}", soft_wrap=True)
        for c in t["committed"]:
            out.print(f"    [red]fired[/red] {c['tool']}({_args(c['args'])}) {c['call_id']}", soft_wrap=True)
    for r in doc["receipts"]:
        out.print(f"receipt: {r['method']} τ={r['tau']} T={r['T']} checkpoint {r['checkpoint']}, "
                  f"{r['transitions']} transitions, {len(r['compensation'] or [])} compensation(s)")
    plan = doc.get("forget_plan")
    if plan:
        out.print(f"forget {', '.join(plan['sources'])}: τ={plan['tau']}, restore R_{plan['checkpoint']}, replay "
                  f"{plan['transitions']} transitions; I(z) = {len(plan['taint'])} artifacts: "
                  f"{', '.join(plan['taint'])}", soft_wrap=True)
    if graph is not None:
        out.print(f"wrote {graph}")
    _write_json(doc, json_path)


@app.command()
def demo(model: str = typer.Option("smollm2", help="Model to run the story on."),
         json_path: Optional[Path] = typer.Option(None, "--json", help="Write the outcome here.")) -> None:
    """A two-minute story: reveal an address, derive from it, revoke it, forget it exactly."""
    from unsee.impl.experiments.demo import run_demo

    doc = run_demo(model, out)
    _write_json(doc, json_path)
    if not (doc["exact"] and doc["optimal"]):
        raise typer.Exit(1)


@app.command()
def audit(suite: str = typer.Option("memory", help="agentdojo | agentdojo:<suite> | memory | preference"),
          n: int = typer.Option(4, help="Episodes."),
          methods: Optional[list[str]] = typer.Option(None, "--method", "--methods", help="A method to audit "
                                                      "(repeatable; default all of B0–B9 and span)."),
          model: str = typer.Option("tiny-llama", help="Model name or path."),
          seed: int = typer.Option(0, help="Episode and sampling seed."),
          tokens: int = typer.Option(24, help="Tokens decoded per reply, probe and sample."),
          json_path: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON here."),
          markdown: Optional[Path] = typer.Option(None, help="Write the tables as Markdown here."),
          workers: int = typer.Option(1, help="Episodes run in this many processes at once (each loads the model "
                                      "once); the results are the serial run's."),
          ray: Optional[str] = typer.Option(None, "--ray", help="Run the episodes as tasks on the Ray cluster at "
                                            "this address ('auto', 'ray://host:port'; 'local' starts one here). "
                                            "Needs the ray extra."),
          decode: str = typer.Option("batched", help="batched: each method's probes and Leak@5 samples decode as "
                                     "one batch; serial: one at a time (for comparison)."),
          attn: str = typer.Option("eager", help="Attention kernel: eager or sdpa (faster on long contexts; "
                                   "exact either way, but the two kernels' bits differ)."),
          journal: Optional[Path] = typer.Option(None, help="Append each finished episode to this JSON-lines "
                                                 "file; the same command run again reuses the episodes it "
                                                 "holds and runs the rest. The episodes' rows are then there, "
                                                 "not in --json.")) -> None:
    """Apply B0–B9 to the same contaminated states and audit each against B5."""
    from unsee.impl.experiments.audit import run_audit
    from unsee.impl.experiments.baselines import METHODS
    from unsee.impl.experiments.reports import (audit_floor_line, audit_identity_line, audit_markdown, audit_tabs,
                                                rich_table)

    chosen = _many(methods, ",".join(METHODS))
    bad = [m for m in chosen if m not in METHODS]
    if bad or n < 1:
        _fail(ValueError(f"unknown method(s) {bad}; choose from {', '.join(METHODS)}" if bad else "--n must be >= 1"))
    if workers < 1 or decode not in ("batched", "serial") or attn not in ("eager", "sdpa"):
        _fail(ValueError("--workers must be at least 1" if workers < 1 else "--decode is batched or serial"
                         if decode not in ("batched", "serial") else f"--attn is eager or sdpa, got {attn!r}"))
    with _progress(every=0) as p:  # off a terminal, a line per episode
        task = p.add_task(f"audit {suite} on {model}", total=n)

        def step(i: int, name: str, reused: bool) -> None:
            p.update(task, completed=i, description=f"audit {name}{' (from the journal)' if reused else ''}")

        def term(signum, frame):  # a SIGTERM stops the audit as Ctrl-C does: workers go, the journal stays
            raise KeyboardInterrupt

        before = signal.signal(signal.SIGTERM, term)
        try:
            doc = run_audit(model, suite, n, chosen, seed, tokens, on_episode=step, workers=workers, ray=ray,
                            batch=decode == "batched", attn=attn, journal=journal)
        except (ValueError, ImportError) as e:
            _fail(e)
        except KeyboardInterrupt:
            kept = (f"the finished episodes are in {journal}: run the same command again to go on" if journal
                    else "nothing was kept (--journal PATH keeps each finished episode)")
            console.print(f"[red]stopped[/red]: {kept}")
            raise typer.Exit(130)
        finally:  # the caller's handler back (the command may run inside another program, e.g. a test)
            signal.signal(signal.SIGTERM, before)
    for tab in audit_tabs(doc):
        out.print(rich_table(tab))
    out.print(audit_floor_line(doc))
    out.print(audit_identity_line(doc))
    r = doc["run"]
    reused = f", {r['episodes_from_journal']} from {journal}" if r["episodes_from_journal"] else ""
    out.print(f"{r['episodes_run']} episodes run in {r['seconds']} s{reused} ({r['episodes_per_hour'] or '–'} episodes/hour; "
              f"{'Ray' if ray else f'{workers} worker(s)'}, {decode} decode, {attn} attention)")
    if journal is not None:  # the journal holds every episode's row: the JSON keeps the summary (949 pairs: ~7 MB of rows)
        doc = {**{k: v for k, v in doc.items() if k != "per_episode"}, "per_episode_in": str(journal)}
    _write_json(doc, json_path)
    if markdown is not None:
        markdown.write_text(audit_markdown(doc))
        console.print(f"[dim]wrote {markdown}[/dim]")


@app.command("convert-agentdojo")
def convert_agentdojo(suite: Optional[str] = typer.Option(None, help="workspace | travel | banking | slack (default all)."),
                      limit: Optional[int] = typer.Option(None, help="Convert only the first N pairs."),
                      benign_turns: int = typer.Option(0, help="Benign setup turns before the task (a shared prefix)."),
                      out_dir: Optional[Path] = typer.Option(None, "--out", help="Write one episode .jsonl per pair here."),
                      json_path: Optional[Path] = typer.Option(None, "--json", help="Write the tally as JSON here.")) -> None:
    """Convert AgentDojo v1.2.2 (user task, injection task) pairs into unsee episodes."""
    import itertools

    from unsee.impl.experiments.agentdojo import convert, pairs
    from unsee.impl.store.episode import write_episode
    from unsee.model import UnseeError

    try:
        todo = list(itertools.islice(pairs(suite), limit))
    except (UnseeError, KeyError) as e:
        _fail(e)
    failures, per_suite = [], {}
    t0 = time.perf_counter()
    with _progress() as p:
        task = p.add_task("converting", total=len(todo))
        for s, u, i in todo:
            try:
                ep = convert(s, u, i, benign_turns=benign_turns)
                per_suite[s] = per_suite.get(s, 0) + 1
                if out_dir is not None:
                    out_dir.mkdir(parents=True, exist_ok=True)
                    write_episode(out_dir / f"{s}-{u}-{i}.jsonl", ep.observations)
            except UnseeError as e:
                failures.append({"pair": [s, u, i], "error": str(e)})
            p.advance(task)
    doc = {"pairs": len(todo), "converted": sum(per_suite.values()), "per_suite": per_suite,
           "failures": failures, "seconds": round(time.perf_counter() - t0, 1)}
    out.print(f"converted {doc['converted']}/{doc['pairs']} pairs in {doc['seconds']}s: {per_suite}")
    for f in failures[:10]:
        console.print(f"[red]{'/'.join(f['pair'])}[/red]: {f['error']}")
    _write_json(doc, json_path)
    if failures:
        raise typer.Exit(1)


@app.command()
def soak(model: str = typer.Option("tiny-llama", help="Model to run the session on."),
         turns: int = typer.Option(30, help="Observations in the session (a tool-schema system prompt, then "
                                   "requests and tool results; the target 12 turns from the end)."),
         iterations: int = typer.Option(20, help="forget → check rounds, each in new processes on a fresh copy."),
         load: int = typer.Option(1, help="Busy processes competing for the CPU while the soak runs."),
         method: Method = typer.Option(Method.B7, help="The forget under test."),
         out_dir: Path = typer.Option(Path("soak"), "--out", help="Folder for the stored session and for every "
                                      "failing iteration's evidence."),
         json_path: Optional[Path] = typer.Option(None, "--json", help="Write the report here.")) -> None:
    """Repeat forget → check in new processes under CPU load and report the failure rate.

    A failing iteration keeps both states, the differing layers, the first differing K/V
    position and the environment."""
    from unsee.impl.experiments.soak import soak as run_soak

    if turns < 13 or iterations < 1 or load < 0:
        _fail(ValueError("--turns must be >= 13 (the target sits 12 turns from the end), --iterations >= 1, --load >= 0"))

    def line(row: dict) -> None:
        verdict = "[green]exact[/green]" if row["exact"] else f"[red]NOT EXACT[/red] (kept in {row.get('kept')})"
        out.print(f"iteration {row['iteration'] + 1}/{iterations}: {verdict}; forget {row.get('seconds')} s "
                  f"(integrity {row.get('integrity_seconds')} s), processes {row['forget_process_seconds']} s + "
                  f"{row['check_process_seconds']} s, load average {row['loadavg']}")

    out.print(f"soak: {model}, {turns} turns, {iterations} iterations of {method.value} forget → check, "
              f"{load} busy process(es)")
    try:
        doc = run_soak(model, turns, iterations, load, out_dir, method.value, on_iteration=line)
    except (RuntimeError, ValueError) as e:
        _fail(e)
    share = doc["integrity_share"]
    out.print(f"failures: {doc['failures']} of {iterations} (rate {doc['failure_rate']:.3f}); integrity checks took "
              f"{'n/a' if share is None else f'{100 * share:.2f} %'} of the forgets' open + forget + save time")
    _write_json(doc, json_path)
    if doc["failures"]:
        raise typer.Exit(1)


bench_app = typer.Typer(help="Benchmarks: measured side by side, counts and times reported.")
app.add_typer(bench_app, name="bench")


@bench_app.command("store")
def bench_store(T: list[int] = typer.Option([100, 200, 400, 800], "--T", help="Session lengths (repeatable)."),
                suffix: int = typer.Option(12, help="Turns from the target to the end (T−τ+1)."),
                repeats: int = typer.Option(2, help="Forgets per length, each in a new process (the fastest is kept)."),
                compact_every: int = typer.Option(0, help="Compact every K turns before τ (0: never; the context then "
                                                   "grows with T)."),
                json_path: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON here."),
                markdown: Optional[Path] = typer.Option(None, help="Write the table as Markdown here.")
                ) -> None:
    """Store bytes per turn and forget cost at a fixed suffix, as T grows (reference model)."""
    from unsee.impl.experiments.bench_store import store_scaling
    from unsee.impl.experiments.reports import report_markdown, rich_table, store_tab

    if suffix < 1 or any(t <= suffix for t in T) or repeats < 1 or compact_every < 0:
        _fail(ValueError("every --T must exceed --suffix >= 1, --repeats must be >= 1 and --compact-every >= 0"))
    with _progress() as p:
        task = p.add_task("store scaling", total=len(T))
        doc = store_scaling(tuple(T), suffix, repeats, on_point=lambda r: p.advance(task), compact_every=compact_every)
    out.print(rich_table(store_tab(doc)))
    _write_json(doc, json_path)
    if markdown is not None:
        markdown.write_text(report_markdown("unsee bench store", [store_tab(doc)]))
        out.print(f"wrote {markdown}")


@bench_app.command("forget")
def bench_forget(model: list[str] = typer.Option(["tiny-llama"], help="Model name or path (repeatable: one "
                                                  "table and one plot panel each)."),
                 T: int = typer.Option(32, "--T", help="Session length; the target is a tool result 12 turns "
                                       "from the end."),
                 repeats: int = typer.Option(3, help="Forgets per method, each in a fresh process on its own "
                                             "copy of the store (medians reported)."),
                 attn: Attn = typer.Option(Attn.auto, help="Attention kernel the session runs under (auto: as "
                                           "`unsee run` chooses it)."),
                 json_path: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON here."),
                 markdown: Optional[Path] = typer.Option(None, help="Write the tables as Markdown here."),
                 plot_path: Optional[Path] = typer.Option(None, "--plot", help="Write a PNG here.")) -> None:
    """B5, B5′ and B7 side by side on a stored agent session, each against the limit of its own forwards."""
    from unsee.impl.experiments.bench_sessions import AGENT_SUFFIX
    from unsee.impl.experiments.limit import METHODS, plot_side_by_side, side_by_side, side_by_side_report
    from unsee.impl.experiments.reports import Tab, report_markdown, rich_table

    if "reference" in model:
        _fail(ValueError("bench forget times a real model's forwards; the reference model has none (use "
                         "`bench store` for it)"))
    if T < AGENT_SUFFIX + 1 or repeats < 1:
        _fail(ValueError(f"--T must be >= {AGENT_SUFFIX + 1} (a system prompt and {AGENT_SUFFIX} turns) and "
                         "--repeats >= 1"))
    docs, items = [], []
    with _progress(every=10.0) as p:
        for m in model:
            kernel = attn.value
            if attn is Attn.auto:
                from unsee.impl.engine.settings import choose_attn

                kernel, why = choose_attn(m)
                console.print(f"[dim]{m}: {kernel} attention ({why})[/dim]")
            task = p.add_task(f"{m}: run, then {repeats}× {', '.join(METHODS)}", total=1 + repeats * len(METHODS))
            doc = side_by_side(m, T, repeats, attn=kernel, on_step=lambda _: p.advance(task))
            docs.append(doc)
            items += side_by_side_report(doc)
    for item in items:
        out.print(rich_table(item) if isinstance(item, Tab) else item)
    if markdown is not None:
        markdown.write_text(report_markdown(f"unsee bench forget, T={T}", items))
        console.print(f"[dim]wrote {markdown}[/dim]")
    _write_json({"runs": docs}, json_path)
    if plot_path is not None:
        plot_side_by_side(docs, plot_path)
        console.print(f"[dim]wrote {plot_path}[/dim]")


@bench_app.command("cost-law")
def bench_cost_law(model: str = typer.Option("tiny-llama", help="Model name or path."),
                   T: Optional[int] = typer.Option(None, "--T", help="Session length, for every sweep (default 50 "
                                                   "with the agent shape, 16 with --shape short)."),
                   indep: Optional[list[str]] = typer.Option(None, help="A fraction of independent post-τ turns "
                                                             "(repeatable; default 0, 0.25, 0.5, 0.75, 1)."),
                   reply: int = typer.Option(8, help="Tokens decoded per turn."),
                   repeats: int = typer.Option(3, help="Repeats per point (median time)."),
                   max_graph: int = typer.Option(1_000_000, help="Largest synthetic graph for the closure query."),
                   shape: Shape = typer.Option(Shape.agent, help="agent (default): a function-calling session (tool "
                                             "schemas, requests, tool results), the target a tool result 12 turns before "
                                             "the end, a few τ. short: one-line turns, every τ."),
                   cross_process: bool = typer.Option(False, "--cross-process", help="With --shape agent: store the "
                                                      "session and forget with `unsee forget` (B5, B7) in fresh processes."),
                   sweep_tau: bool = typer.Option(True, "--tau-sweep/--no-tau-sweep", help="Sweep τ (and the "
                                                  "forget cost against T); off: the indep sweep alone."),
                   sweep_method: Optional[list[str]] = typer.Option(None, "--sweep-method", help="Methods of the τ "
                                                                    "sweep (repeatable; default B5, B5', B7, B7-decode: "
                                                                    "Algorithm 1 decoding every reply). B7 is always in."),
                   json_path: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON here."),
                   markdown: Optional[Path] = typer.Option(None, help="Write the tables as Markdown here."),
                   plot_path: Optional[Path] = typer.Option(None, "--plot", help="Write a PNG of the sweeps here.")) -> None:
    """Sweep τ and indep; B5, B5′ and B7 on the same sessions; fit B7's cost to T−τ+1."""
    from unsee.impl.experiments.bench import cost_law
    from unsee.impl.experiments.bench_plot import plot
    from unsee.impl.experiments.bench_sessions import AGENT_SUFFIX, AGENT_T, sweep_taus
    from unsee.impl.experiments.bench_sweeps import SWEEP_METHODS
    from unsee.impl.experiments.reports import Tab, cost_law_report, report_markdown, rich_table

    try:
        fractions = [float(x) for x in _many(indep, "0,0.25,0.5,0.75,1")]
    except ValueError:
        _fail(ValueError(f"--indep must be comma-separated fractions, got {indep!r}"))
    methods = tuple(dict.fromkeys(["B7", *_many(sweep_method, ",".join(SWEEP_METHODS))]))
    if set(methods) - set(SWEEP_METHODS):
        _fail(ValueError(f"--sweep-method takes {', '.join(SWEEP_METHODS)}; got {', '.join(methods)}"))
    shape = shape.value
    if cross_process and shape != "agent":
        _fail(ValueError("--cross-process measures the agent shape: add --shape agent"))
    T = T if T is not None else (AGENT_T if shape == "agent" else 16)
    if T < 2 or not fractions or any(not 0 <= f <= 1 for f in fractions):
        _fail(ValueError("--T must be >= 2 and every --indep fraction in [0, 1]"))
    if shape == "agent" and T < AGENT_SUFFIX + 1:
        _fail(ValueError(f"--shape agent needs --T >= {AGENT_SUFFIX + 1} (the target sits at τ = T−{AGENT_SUFFIX - 1})"))
    sizes = tuple(n for n in (10**3, 10**4, 10**5, 10**6) if n <= max_graph)
    with _progress() as p:
        total = len(sweep_taus(shape, T)) * sweep_tau + len(fractions) * (2 if cross_process else 1)
        task = p.add_task(f"cost law ({shape}) on {model}", total=total)
        doc = cost_law(model, T, fractions, reply, repeats, sizes, on_point=lambda: p.advance(task), shape=shape,
                       cross=cross_process, sweep_tau=sweep_tau, sweep_methods=methods)
    for item in cost_law_report(doc):
        out.print(rich_table(item) if isinstance(item, Tab) else item)
    if markdown is not None:
        markdown.write_text(report_markdown(f"unsee bench cost-law: {model}, {shape} shape, T={T}", cost_law_report(doc)))
        console.print(f"[dim]wrote {markdown}[/dim]")
    _write_json(doc, json_path)
    if plot_path is not None:
        plot(doc, plot_path)
        console.print(f"[dim]wrote {plot_path}[/dim]")


def main() -> None:  # pragma: no cover
    app(prog_name="unsee")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
