"""The commands on one stored session: `run`, `forget`, `check`, `show`, and the `demo`."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from unsee.impl.cli.common import (KEY_FILE, LEDGER, Attn, Dtype, KvPages, Method, Policy, app, args_text, console, environment_failure,
                                   fail, opened_store, out, progress, threads_arg, threads_value, write_json)
from unsee.impl.store.episode import MAX_REPLY, MAX_TURNS


@app.command()
def run(episode: Path = typer.Argument(..., help="Episode file: one JSON observation per line."),
        db: Path = typer.Option(..., help="SQLite session store to create."),
        model: str = typer.Option("tiny-llama", help="tiny-llama | tiny-qwen2 | tiny-mistral | recall-tiny | "
                                                    "recall-tiny-2 | recall-tiny-3 | recall-smollm2 | smollm2 | "
                                                    "reference | a path."),
        max_new_tokens: int = typer.Option(8, min=0, max=MAX_REPLY,
                                           help="Reply length for user lines that do not say."),
        max_turns: int = typer.Option(MAX_TURNS, min=1, help="The most observations an episode may hold; a "
                                      "longer one is refused before anything runs."),
        call_tokens: Optional[int] = typer.Option(None, min=1, help="The most tokens a tool call's JSON arguments "
                                                  "may take, with the end token (default: 64, or more where a "
                                                  "declared tool's longest arguments need it); a call cut there is "
                                                  "invalid and fails without running."),
        seed: Optional[int] = typer.Option(None, help="Sample with this seed (default: greedy decoding)."),
        policy: Policy = typer.Option(Policy.every, help="Checkpoint policy."),
        kv_pages: KvPages = typer.Option(KvPages.keep, help="keep: persist every block's K/V rows so that a forget "
                                     "restores its checkpoint by reading them; none: re-materialize instead."),
        attn: Attn = typer.Option(Attn.auto, envvar="UNSEE_ATTN",
                                  help="Attention kernel (part of the state: every later forget runs under it). "
                                  "auto: eager or sdpa, whichever is faster here (see --threads)."),
        dtype: Dtype = typer.Option(Dtype.auto, envvar="UNSEE_DTYPE",
                                    help="Weights and cache dtype, part of the state (bfloat16: other numerics than "
                                    "float32, so other replies). auto: float32 or bfloat16, whichever is faster "
                                    "here (see --threads)."),
        threads: str = typer.Option("auto", callback=threads_value, metavar="auto|N", envvar="UNSEE_THREADS",
                                    help="CPU threads of every forward (part of the state, like the kernel: more "
                                    "threads split the reductions differently). auto: 1 or every core (1 on a "
                                    "GPU). Every auto setting is chosen together: of the combinations whose "
                                    "premise self-test holds here, the fastest on a long block and short forwards "
                                    "after it, measured once per model and machine (kept in the unsee cache, "
                                    "selftest/settings-*.json: delete them to measure again) and stated in the "
                                    "output."),
        key_file: Optional[Path] = KEY_FILE, ledger: Optional[Path] = LEDGER) -> None:
    """Run a session from an episode file and store it."""
    import os
    import sqlite3
    import sys

    from unsee.impl.store.episode import read_episode
    from unsee.impl.store.agent import Agent
    from unsee.model import Config, UnseeError

    done = 0  # steps run, for an error the engine raises on the way
    ep = None
    try:
        ep = read_episode(episode, max_new_tokens, max_turns)  # every line is checked before anything is written
        stream, tools = list(ep.observations), ep.tools
        settings = {} if model == "reference" else {"dtype": dtype.value, "threads": threads_arg(threads),
                                                    "attn": attn.value}
        if call_tokens is None:  # room for the longest arguments of every declared tool
            call_tokens = max([Config.call_tokens] + [t.call_room() for t in tools])
            if call_tokens > Config.call_tokens:
                out.print(f"tool calls: up to {call_tokens} tokens of arguments (a declared tool's longest arguments "
                          "need them; --call-tokens sets it)")
        config = Config(sampling=seed is not None, seed=seed, tools=tools, call_tokens=call_tokens)
        for line in config.calls_that_may_be_cut():
            console.print(f"[yellow]warning[/yellow] {escape(line.replace('call_tokens', '--call-tokens'))}",
                          soft_wrap=True)
        if os.path.lexists(db):  # Agent.create refuses it too; here before the model loads for the check
            raise UnseeError(f"{db} already exists; pick a new path (a session store is never overwritten)")
        _check_fit(ep, model, config, settings)
        if "auto" in settings.values():
            console.print("[dim]choosing the auto settings: each candidate is measured once per model and machine "
                          "(a minute or more the first time for a model the size of SmolLM2), then read back"
                          "[/dim]", soft_wrap=True)
        with progress() as p:
            task = p.add_task(f"run {episode.name} on {model}", total=len(stream))

            def stepped() -> None:
                nonlocal done
                done += 1
                p.advance(task)
            with warnings.catch_warnings():  # printed above, as the command's own warning
                warnings.filterwarnings("ignore", message="tool .*: its longest arguments")
                agent = Agent.create(db, model, config, policy.value,
                                     kv_pages=kv_pages is KvPages.keep, observations=stream,
                                     on_step=stepped, key=key_file, ledger=ledger, **settings)
    except (UnseeError, ValueError) as e:
        engine = sys.modules.get("unsee.impl.engine.lm")  # loaded only for a real model (torch)
        if engine is not None and isinstance(e, engine.ContextWindowError):
            # past the window where the check could not count (a tool's result): the path was given back
            fail(UnseeError(f"line {ep.lines[min(done, len(ep.lines) - 1)]}: {e}; nothing was stored at {db}"))
        fail(e)
    except sqlite3.Error as e:
        fail(UnseeError(f"{db}: {e}; nothing was stored there"))
    except Exception as e:  # out of memory, a file the machine refuses: one line (common.App); bugs go on
        line = environment_failure(e)
        if line is None or os.environ.get("UNSEE_DEBUG"):
            raise
        fail(UnseeError(f"{line}; nothing was stored at {db}" if ep is not None else line))
    with agent:
        s, store = agent.session, agent.store
        n_pages, page_bytes, page_tokens = store.page_bytes()
        identity = store.identity
        out.print(f"stored T={s.T} transitions, {len(s.checkpoints)} checkpoints, {len(s.state.artifacts)} "
                  f"artifacts in {db}")
        if "weights_sha256" in identity:
            out.print(f"settings: {identity['dtype']}, {identity['attn']} attention, {identity['threads']} thread(s) "
                      f"on {identity['device']} (every later forget and check runs under these)")
            if agent.settings_note:
                out.print(f"chosen: {agent.settings_note}", soft_wrap=True)
        if n_pages:
            out.print(f"K/V pages: {n_pages} blocks, {page_tokens} tokens, {page_bytes / 1e6:.1f} MB "
                      f"({page_bytes / page_tokens / 1e3:.1f} KB per token); capture "
                      f"{1000 * agent.runtime.model.capture_seconds / max(1, s.T):.2f} ms per step")


def _check_fit(ep, model: str, config, settings: dict) -> None:
    """Refuse an episode whose context cannot fit the model's window (`check_context`), before the
    store is claimed or anything runs: the model is loaded for its template and window (the run
    then takes the same load; under an auto setting the load is dropped again, the chosen one loads)."""
    from unsee.impl.store.episode import REFERENCE_WINDOW, check_context

    if model == "reference":
        from unsee.model.lm import REFERENCE

        check_context(ep, REFERENCE.encode, REFERENCE.header, REFERENCE_WINDOW, "the reference model",
                      config.summary_tokens, config.call_tokens, own=False)
        return
    from unsee.impl.engine import models
    from unsee.impl.engine.lm import window_of

    dtype = "float32" if settings["dtype"] == "auto" else settings["dtype"]
    attn = "eager" if settings["attn"] == "auto" else settings["attn"]
    bundle = models.load(model, dtype=dtype, attn=attn)
    window = window_of(bundle.model.config)
    if window is not None:
        tpl = bundle.template
        check_context(ep, tpl.block, tpl.header, window, model, config.summary_tokens, config.call_tokens,
                      bos=len(tpl.bos()))
    if "auto" in (settings["dtype"], settings["attn"]):
        models.forget(model, dtype, None, attn)


@app.command()
def forget(db: Path = typer.Option(..., help="The session store."),
           source: Optional[list[str]] = typer.Option(None, help="Source id to forget (repeatable)."),
           method: Method = typer.Option(Method.B7, help="B7 (selective replay), B5 (full reset) or B5' (full "
                                         "reset with the stored cache as a prefix cache)."),
           model: Optional[str] = typer.Option(None, help="Refuse unless the store was run on this model."),
           reapply: bool = typer.Option(False, "--reapply", help="Re-apply the forgets the store's ledger recorded "
                                        "to a store it refuses as an older state (a restored backup, a "
                                        "rolled-back file): forget again every stored part a tombstone names."),
           json_path: Optional[Path] = typer.Option(None, "--json", help="Write the receipt here."),
           key_file: Optional[Path] = KEY_FILE, ledger: Optional[Path] = LEDGER) -> None:
    """Forget sources from a stored session and write the receipt (atomically)."""
    from unsee.impl.store.agent import forget_stored
    from unsee.impl.store.episode import normalize_source
    from unsee.model import UnseeError

    method = method.value
    if reapply:
        if source:
            fail(UnseeError("--reapply forgets what the ledger recorded; give no --source with it"))
        return _reapply(db, method, json_path, key_file, ledger)
    if not source:
        fail(UnseeError("name what to forget with --source ID (repeatable), or give --reapply"))
    source = [normalize_source(s) for s in source]
    with opened_store(db, "; the store holds the session as it was before this forget", key_file, ledger) as store, \
            console.status(f"forgetting {len(source)} source(s) ({method}) from {db}"):
        rt, doc = forget_stored(store, list(source), method, model=model)
    table = Table(title=f"receipt: forget {len(source)} source(s) ({method})")
    table.add_column("field")
    table.add_column("value", justify="right")
    for k in ("tau", "T", "checkpoint", "transitions", "replies", "replies_skipped", "tokens_prefilled",
              "tokens_decoded", "tokens_verified", "tokens_restored", "tokens_reused", "tokens_rematerialized",
              "seconds", "import_seconds", "load_seconds", "open_seconds", "save_seconds"):
        table.add_row(k, str(doc[k]))
    table.add_row("compensation", str(len(doc["compensation"])))
    out.print(table)
    from unsee.impl.store.show import compensation_text

    for c in doc["compensation"]:
        console.print(f"[yellow]needs compensation[/yellow] {c['call_id']}: {escape(compensation_text(c))}", soft_wrap=True)
    if doc["pages_recomputed"]:
        console.print(f"[yellow]{len(doc['pages_recomputed'])} stored K/V page(s) failed their digest and were "
                      "recomputed from the verified tokens[/yellow] (counted in tokens_rematerialized)")
    trace = doc.get("trace")  # the engine's event log (a real model), checked against the spec
    if trace is not None:
        out.print(f"trace: {trace['events']} engine events, [green]allowed by the spec[/green]")
    write_json(doc, json_path)


def _reapply(db: Path, method: str, json_path: Optional[Path], key_file, ledger) -> None:
    from unsee.impl.store.agent import reapply
    from unsee.model import UnseeError

    try:
        with console.status(f"re-applying the forgets the ledger of {db} recorded"):
            done = reapply(db, key_file, ledger, method)
    except (UnseeError, ValueError) as e:
        fail(e)
    if done["sources"]:
        out.print(f"forgot again {done['forgotten']} part(s) the ledger's tombstones name, from source(s) "
                  f"{', '.join(done['sources'])}: {db} is now the state its ledger records")
    else:
        out.print(f"nothing forgotten is in {db}: its ledger now records it as it is")
    if done["steps_lost"]:
        console.print(f"[yellow]{done['steps_lost']} step(s) the ledger recorded after this state are not in the "
                      "store[/yellow]: they were lost with the backup and cannot be re-made")
    write_json(done, json_path)

@app.command()
def check(db: Path = typer.Option(..., help="The session store."),
          fast: bool = typer.Option(False, "--fast", help="Verify every stored byte against its digest (K/V "
                                    "pages included) without the full reset."),
          json_path: Optional[Path] = typer.Option(None, "--json", help="Write the report here."),
          key_file: Optional[Path] = KEY_FILE, ledger: Optional[Path] = LEDGER) -> None:
    """Verify the store's digests, then re-derive the state by a full reset and compare.

    The full reset runs from the stored log; every layer is compared."""
    from unsee.impl.store.agent import check_store

    with opened_store(db, key=key_file, ledger=ledger) as store:
        sealed = store.key.id
        if fast:
            doc = check_store(store, fast=True)
        else:
            with progress() as p:
                task = p.add_task("full reset from the log", total=store.length())
                doc = check_store(store, on_step=lambda: p.advance(task))
    if fast:
        bad = doc["pages_damaged"]
        out.print(f"[green]verified[/green] T={doc['T']}: every row and {doc['pages'] - len(bad)} of {doc['pages']} "
                  "K/V pages match their digests (no full reset run; `unsee check` without --fast re-derives the state)")
        out.print(seal_statement(sealed), soft_wrap=True)
        for page in bad[:20]:
            console.print(f"  [yellow]K/V page {page['key']} (born at turn {page['born']}) fails its digest[/yellow]: "
                          "a forget recomputes it from the verified tokens")
        write_json(doc, json_path)
        if bad:
            raise typer.Exit(1)
        return
    mismatches = doc["mismatches"]
    out.print(f"[{'green' if doc['exact'] else 'red'}]exact={doc['exact']}[/] T={doc['T']}, "
              f"{len(mismatches)} mismatching layers")
    for m in mismatches[:20]:
        console.print(f"  layer {m['layer']} differs at t={m['t']}")
    write_json(doc, json_path)
    if mismatches:
        raise typer.Exit(1)


@app.command()
def show(db: Path = typer.Option(..., help="The session store."),
         source: Optional[list[str]] = typer.Option(None, help="Mark what a forget of this source would touch "
                                                   "(repeatable): its artifacts, τ, I(z) and the checkpoint."),
         graph: Optional[Path] = typer.Option(None, help="Draw the provenance graph here (.png or .svg)."),
         json_path: Optional[Path] = typer.Option(None, "--json", help="Write the decoded session here."),
         key_file: Optional[Path] = KEY_FILE, ledger: Optional[Path] = LEDGER) -> None:
    """The stored session as a person reads it, decoded to text.

    Each turn's observation with its source ids, the model's replies, memory, summaries, tool
    calls, side effects and receipts."""
    from unsee.impl.store.episode import normalize_source
    from unsee.impl.store.show import compensation_text, draw_graph, forget_plan, session_view
    from unsee.model import UnseeError

    if graph is not None and graph.suffix not in (".png", ".svg"):
        fail(UnseeError(f"--graph takes a .png or .svg path, got {graph}"))
    source = [normalize_source(s) for s in source or ()]
    with opened_store(db, key=key_file, ledger=ledger) as store:
        doc = session_view(store)
        if source:
            doc["forget_plan"] = forget_plan(store, list(source))
        if graph is not None:
            doc["graph"] = draw_graph(store, graph, tuple(source or ()))
    out.print(f"[bold]{db}[/bold]: {doc['model']}, T={doc['T']}, policy {doc['policy']}, "
              f"checkpoints at {doc['checkpoints']}")
    plan = doc.get("forget_plan")
    taint = set(plan["taint"]) if plan else set()
    for t in doc["turns"]:
        parts = "  ".join(f"[cyan]\\[{p['source']}][/cyan] {p['text']}" for p in t["parts"]) or "[dim](empty)[/dim]"
        tau = " [red](τ: a forget replays from here)[/red]" if plan and t["t"] == plan["tau"] else ""
        out.print(f"[bold]t={t['t']}[/bold] {t['kind']}: {parts}{tau}", soft_wrap=True)
        hit = [a["type"] for a in t["artifacts"] if a["id"] in taint]
        if hit:
            out.print(f"    [red]in I(z)[/red]: {', '.join(hit)}", soft_wrap=True)
        for r in t["replies"]:
            out.print(f"    [magenta]reply[/magenta] {r}", soft_wrap=True)
        for c in t["calls"]:
            why = "" if c["valid"] else (f" [red](invalid: cut at {c['tokens']} tokens, call_tokens; the call failed "
                                         "and did not run)[/red]" if c["cut"] else
                                         " [red](invalid for its schema: the call failed and did not run)[/red]")
            out.print(f"    [blue]call[/blue] {escape(c['tool'])}({escape(c['arguments'])}){why}", soft_wrap=True)
        for r in t["results"]:
            out.print(f"    [green]result[/green] {escape(r)}", soft_wrap=True)
        for m in t["memory"]:
            out.print(f"    [yellow]memory[/yellow] {m['text']}", soft_wrap=True)
        if t["summary"] is not None:
            out.print(f"    [green]summary[/green] {t['summary']}", soft_wrap=True)
        for c in t["pending_calls"]:
            out.print(f"    [blue]planned[/blue] {c['call_id']}", soft_wrap=True)
        for c in t["fired"]:
            out.print(f"    [red]fired[/red] {c['tool']}({args_text(c['args'])}) {c['call_id']}", soft_wrap=True)
        for c in t["compensation"]:
            out.print(f"    [yellow]needs compensation[/yellow] {c['call_id']}: {escape(compensation_text(c))}", soft_wrap=True)
        if plan and t["t"] == plan["checkpoint"]:
            out.print(f"[blue]── checkpoint R_{plan['checkpoint']}: a forget restores it (shared with the twin) ──[/blue]")
    for r in doc["receipts"]:
        out.print(f"receipt: {r['method']} τ={r['tau']} T={r['T']} checkpoint {r['checkpoint']}, "
                  f"{r['transitions']} transitions, {len(r['compensation'] or [])} compensation(s)")
    if plan:
        out.print(f"forget {', '.join(plan['sources'])}: τ={plan['tau']}, restore R_{plan['checkpoint']}, replay "
                  f"{plan['transitions']} transitions; I(z) = {len(plan['taint'])} artifacts: "
                  f"{', '.join(plan['taint'])}", soft_wrap=True)
    if graph is not None:
        out.print(f"wrote {graph}")
    write_json(doc, json_path)


@app.command()
def demo(model: str = typer.Option("smollm2", help="Model to run the story on."),
         json_path: Optional[Path] = typer.Option(None, "--json", help="Write the outcome here.")) -> None:
    """A two-minute story: reveal an address, derive from it, revoke it, forget it exactly."""
    from unsee.impl.experiments.demo import run_demo

    doc = run_demo(model, out)
    write_json(doc, json_path)
    if not (doc["exact"] and doc["optimal"]):
        raise typer.Exit(1)


def seal_statement(sealed: str) -> str:
    """What the store's seal defends against, in one line (docs/trust.md)."""
    if sealed.startswith("hmac-sha256:"):
        return (f"sealed under key {sealed}: no one without the key can alter it and re-seal it unseen "
                "(see docs/trust.md)")
    return ("[yellow]sealed with a checksum (no key)[/yellow]: it detects accidental corruption, not a forger who can "
            "write the file and its ledger; give --key-file (unsee key new, unsee rekey) for a seal (docs/trust.md)")


key_app = typer.Typer(help="The keys stores are sealed under (docs/trust.md).", no_args_is_help=True)
app.add_typer(key_app, name="key")


@key_app.command("new")
def key_new(path: Path = typer.Argument(..., help="Where to write the key (never overwritten; mode 0600).")) -> None:
    """Write a new random key to PATH: give it to every store command with --key-file or UNSEE_KEY_FILE."""
    from unsee.impl.store.keys import new_key
    from unsee.model import UnseeError

    try:
        k = new_key(path)
    except UnseeError as e:
        fail(e)
    out.print(f"wrote a new key to {path} (id {k.id}); keep it where the agent's operators cannot read it")


@app.command()
def rekey(db: Path = typer.Option(..., help="The session store."),
          key_file: Optional[Path] = typer.Option(None, "--key-file", metavar="PATH",
                                                  help="The key it is sealed under now (none: a checksum)."),
          new_key_file: Optional[Path] = typer.Option(None, "--new-key-file", metavar="PATH",
                                                      help="The key to seal it under (none: a checksum)."),
          ledger: Optional[Path] = LEDGER) -> None:
    """Seal a store and its ledger under another key (or add a key to a store sealed with a checksum).

    Everything is verified under the old key first; an interrupted rotation is finished by running
    the same command again."""
    from unsee.impl.store.sqlite import rekey as rekey_store
    from unsee.model import UnseeError

    try:
        done = rekey_store(db, key_file, new_key_file, ledger)
    except (UnseeError, ValueError) as e:
        fail(e)
    out.print(f"{db} and its ledger ({done['ledger']}, {done['records']} records) are now sealed as {done['seal']}")
