"""`unsee bench`: the benchmarks, measured side by side, counts and times reported."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from unsee.impl.cli.common import (Attn, Dtype, Shape, app, console, fail, many, out, progress, threads_arg,
                                   threads_value, write_json)


bench_app = typer.Typer(help="Benchmarks: measured side by side, counts and times reported.")
app.add_typer(bench_app, name="bench")


def print_report(items) -> None:
    """Tables as tables; each sentence unbroken on lines of its own (a reader or a pipe searches it whole)."""
    from unsee.impl.experiments.reports import Tab, rich_table

    for item in items:
        if isinstance(item, Tab):
            out.print(rich_table(item))
        else:
            out.print(item, soft_wrap=True)


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
        fail(ValueError("every --T must exceed --suffix >= 1, --repeats must be >= 1 and --compact-every >= 0"))
    with progress() as p:
        task = p.add_task("store scaling", total=len(T))
        doc = store_scaling(tuple(T), suffix, repeats, on_point=lambda r: p.advance(task), compact_every=compact_every)
    out.print(rich_table(store_tab(doc)))
    write_json(doc, json_path)
    if markdown is not None:
        markdown.write_text(report_markdown("unsee bench store", [store_tab(doc)]))
        out.print(f"wrote {markdown}")


@bench_app.command("trust")
def bench_trust(model: str = typer.Option("smollm2", help="Model of the stored session whose steps and forget are timed."),
                T: int = typer.Option(12, "--T", help="Session length."),
                tau: int = typer.Option(6, help="The target's step."),
                turns: int = typer.Option(1000, help="Saves (and ledger records) of the store whose open is timed."),
                repeats: int = typer.Option(3, help="Opens timed (the fastest is kept)."),
                json_path: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON here."),
                markdown: Optional[Path] = typer.Option(None, help="Write the tables as Markdown here.")) -> None:
    """The keyed seal and the ledger: seconds per step and per forget, and the ledger check at open."""
    from unsee.impl.experiments.bench_trust import trust_costs
    from unsee.impl.experiments.reports import report_markdown, trust_report

    if not 1 < tau <= T or turns < 2 or repeats < 1:
        fail(ValueError("need 1 < --tau <= --T, --turns >= 2 and --repeats >= 1"))
    with progress() as p:
        task = p.add_task("trust costs", total=3)
        doc = trust_costs(model, T, tau, turns, repeats, on_part=lambda: p.advance(task))
    items = trust_report(doc)
    print_report(items)
    write_json(doc, json_path)
    if markdown is not None:
        markdown.write_text(report_markdown("unsee bench trust", items))
        out.print(f"wrote {markdown}")


@bench_app.command("forget")
def bench_forget(model: list[str] = typer.Option(["tiny-llama"], help="Model name or path (repeatable: one "
                                                  "table and one plot panel each)."),
                 T: int = typer.Option(32, "--T", help="Session length; the target is a tool result 12 turns "
                                       "from the end."),
                 repeats: int = typer.Option(3, help="Forgets per method, each in a fresh process on its own "
                                             "copy of the store (medians reported)."),
                 attn: Attn = typer.Option(Attn.auto, help="Attention kernel the session runs under (auto: as "
                                           "`unsee run` chooses it, with any other auto setting)."),
                 threads: str = typer.Option("1", callback=threads_value, metavar="auto|N",
                                             help="CPU threads of every forward, the session's and every "
                                             "method's (part of the state, like the kernel; auto: as `unsee run` "
                                             "chooses it; 1 by default, as docs/results ran)."),
                 dtype: Dtype = typer.Option(Dtype.float32, help="Weights and cache dtype of the session and "
                                             "every method (part of the state, like the kernel; auto: as `unsee "
                                             "run` chooses it)."),
                 json_path: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON here."),
                 markdown: Optional[Path] = typer.Option(None, help="Write the tables as Markdown here."),
                 plot_path: Optional[Path] = typer.Option(None, "--plot", help="Write a PNG here.")) -> None:
    """B5, B5′ and B7 side by side on a stored agent session, each against the limit of its own forwards."""
    from unsee.impl.experiments.bench_sessions import AGENT_SUFFIX
    from unsee.impl.experiments.limit import METHODS, plot_side_by_side, side_by_side, side_by_side_report
    from unsee.impl.experiments.reports import report_markdown

    if "reference" in model:
        fail(ValueError("bench forget times a real model's forwards; the reference model has none (use "
                         "`bench store` for it)"))
    if T < AGENT_SUFFIX + 1 or repeats < 1:
        fail(ValueError(f"--T must be >= {AGENT_SUFFIX + 1} (a system prompt and {AGENT_SUFFIX} turns) and "
                         "--repeats >= 1"))
    docs, items = [], []
    with progress(every=10.0) as p:
        for m in model:
            chosen = {"attn": attn.value, "dtype": dtype.value, "threads": threads_arg(threads)}
            if "auto" in chosen.values():
                from unsee.impl.engine.settings import choose, label

                chosen, why = choose(m, None, **chosen)
                console.print(f"[dim]{m}: {escape(label(chosen))} ({escape(why)})[/dim]", soft_wrap=True)
            task = p.add_task(f"{m}: run, then {repeats}× {', '.join(METHODS)}", total=1 + repeats * len(METHODS))
            doc = side_by_side(m, T, repeats, attn=chosen["attn"], on_step=lambda _: p.advance(task),
                               threads=chosen["threads"], dtype=chosen["dtype"])
            docs.append(doc)
            items += side_by_side_report(doc)
    print_report(items)
    if markdown is not None:
        markdown.write_text(report_markdown(f"unsee bench forget, T={T}", items))
        console.print(f"[dim]wrote {markdown}[/dim]")
    write_json({"runs": docs}, json_path)
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
    from unsee.impl.experiments.reports import cost_law_report, report_markdown

    try:
        fractions = [float(x) for x in many(indep, "0,0.25,0.5,0.75,1")]
    except ValueError:
        fail(ValueError(f"--indep must be comma-separated fractions, got {indep!r}"))
    methods = tuple(dict.fromkeys(["B7", *many(sweep_method, ",".join(SWEEP_METHODS))]))
    if set(methods) - set(SWEEP_METHODS):
        fail(ValueError(f"--sweep-method takes {', '.join(SWEEP_METHODS)}; got {', '.join(methods)}"))
    shape = shape.value
    if cross_process and shape != "agent":
        fail(ValueError("--cross-process measures the agent shape: add --shape agent"))
    T = T if T is not None else (AGENT_T if shape == "agent" else 16)
    if T < 2 or not fractions or any(not 0 <= f <= 1 for f in fractions):
        fail(ValueError("--T must be >= 2 and every --indep fraction in [0, 1]"))
    if shape == "agent" and T < AGENT_SUFFIX + 1:
        fail(ValueError(f"--shape agent needs --T >= {AGENT_SUFFIX + 1} (the target sits at τ = T−{AGENT_SUFFIX - 1})"))
    sizes = tuple(n for n in (10**3, 10**4, 10**5, 10**6) if n <= max_graph)
    with progress() as p:
        total = len(sweep_taus(shape, T)) * sweep_tau + len(fractions) * (2 if cross_process else 1)
        task = p.add_task(f"cost law ({shape}) on {model}", total=total)
        doc = cost_law(model, T, fractions, reply, repeats, sizes, on_point=lambda: p.advance(task), shape=shape,
                       cross=cross_process, sweep_tau=sweep_tau, sweep_methods=methods)
    print_report(cost_law_report(doc))
    if markdown is not None:
        markdown.write_text(report_markdown(f"unsee bench cost-law: {model}, {shape} shape, T={T}", cost_law_report(doc)))
        console.print(f"[dim]wrote {markdown}[/dim]")
    write_json(doc, json_path)
    if plot_path is not None:
        plot(doc, plot_path)
        console.print(f"[dim]wrote {plot_path}[/dim]")

