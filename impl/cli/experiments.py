"""`unsee audit`, `convert-agentdojo` and `soak`: the experiments run over many sessions."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Optional

import typer

from unsee.impl.cli.common import Method, app, console, fail, many, out, progress, write_json


@app.command()
def audit(suite: str = typer.Option("memory", help="agentdojo | agentdojo:<suite> | agentdojo:stratified "
                                                 "(the four suites in turn) | memory | preference"),
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

    chosen = many(methods, ",".join(METHODS))
    bad = [m for m in chosen if m not in METHODS]
    if bad or n < 1:
        fail(ValueError(f"unknown method(s) {bad}; choose from {', '.join(METHODS)}" if bad else "--n must be >= 1"))
    if workers < 1 or decode not in ("batched", "serial") or attn not in ("eager", "sdpa"):
        fail(ValueError("--workers must be at least 1" if workers < 1 else "--decode is batched or serial"
                         if decode not in ("batched", "serial") else f"--attn is eager or sdpa, got {attn!r}"))
    with progress(every=0) as p:  # off a terminal, a line per episode
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
            fail(e)
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
    write_json(doc, json_path)
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
        fail(e)
    failures, per_suite = [], {}
    t0 = time.perf_counter()
    with progress() as p:
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
    write_json(doc, json_path)
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
        fail(ValueError("--turns must be >= 13 (the target sits 12 turns from the end), --iterations >= 1, --load >= 0"))

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
        fail(e)
    share = doc["integrity_share"]
    out.print(f"failures: {doc['failures']} of {iterations} (rate {doc['failure_rate']:.3f}); integrity checks took "
              f"{'n/a' if share is None else f'{100 * share:.2f} %'} of the forgets' open + forget + save time")
    write_json(doc, json_path)
    if doc["failures"]:
        raise typer.Exit(1)

