"""What every command shares: the option types, the consoles, progress, JSON output and errors."""

from __future__ import annotations

import errno
import json
import os
import re
import sqlite3
import sys
import time
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Iterator, NoReturn, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

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
    auto = "auto"
    float32 = "float32"
    bfloat16 = "bfloat16"


def threads_value(value: str) -> str:
    """--threads: "auto" or a count >= 1 (typer calls this to check the option)."""
    if value != "auto" and not (value.isdigit() and int(value) >= 1):
        raise typer.BadParameter(f"{value!r} is neither auto nor a count >= 1")
    return value


def threads_arg(value: str):
    return value if value == "auto" else int(value)


class Shape(str, Enum):
    short = "short"
    agent = "agent"


def many(values: Optional[list[str]], default: str) -> list[str]:
    """A repeatable option; each value may also be comma-separated (the older spelling)."""
    return [x.strip() for v in (values or [default]) for x in v.split(",") if x.strip()]


def args_text(args) -> str:
    """A call's decoded JSON arguments, as the user reads them."""
    return json.dumps(args, ensure_ascii=False)


def environment_failure(e: BaseException) -> str | None:
    """The one line that says what the machine a command runs on refused it (memory, a file it
    cannot read or write) and what to do, or None for anything else (a bug keeps its traceback)."""
    text = " ".join(str(e).split())  # one line, whatever the library wrote
    if isinstance(e, MemoryError) or (isinstance(e, OSError) and e.errno == errno.ENOMEM) \
            or (isinstance(e, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text.lower())) \
            or (isinstance(e, (ImportError, OSError)) and "failed to map segment" in text):
        asked = re.search(r"tried to allocate (\d+) bytes", text)  # torch's CPU allocator says how much
        if asked:
            n = int(asked.group(1))
            what = f"an allocation of {n / 1e9:.1f} GB failed" if n >= 1e9 else \
                f"an allocation of {n / 1e6:.1f} MB failed" if n >= 1e6 else f"an allocation of {n} bytes failed"
        elif "failed to map segment" in text:
            what = f"a library could not be loaded ({text})"
        else:
            what = text or "Python could not allocate memory"
        return (f"out of memory: {what}. Free memory or raise the process's limit (ulimit -v), or use a smaller "
                "model or shorter observations")
    if isinstance(e, OSError):
        where = f"{e.filename}: " if e.filename else ""
        return (f"{where}{e.strerror or text}; check the path, its permissions and the free space "
                "(UNSEE_DEBUG=1 shows where it failed)")
    return None


class App(typer.Typer):
    """The `unsee` command: a failure of the machine (`environment_failure`) ends a command with one
    line on stderr and exit code 2, as a refusal does (`fail`), instead of a traceback. UNSEE_DEBUG=1
    shows the traceback."""

    def __call__(self, *args, **kwargs):
        try:
            return super().__call__(*args, **kwargs)
        except Exception as e:
            line = None if os.environ.get("UNSEE_DEBUG") else environment_failure(e)
            if line is None:
                raise
            console.print(f"[red]error:[/red] {escape(line)}", soft_wrap=True, highlight=False)
            sys.exit(2)


app = App(add_completion=False, no_args_is_help=True,
          help="Exact execution-state unlearning for stateful LLM agents, and the proofs that it is exact.")


def _width(stream) -> int | None:
    """Rich's width: the terminal's, or $COLUMNS; 120 for a pipe or a file (Rich would take 80 and
    squeeze a table's headers into two lines)."""
    return None if os.environ.get("COLUMNS") or stream.isatty() else 120


console = Console(stderr=True, width=_width(sys.stderr))
out = Console(width=_width(sys.stdout))


def write_json(doc: dict, path: Optional[Path]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        console.print(f"[dim]wrote {path}[/dim]")


class LineProgress(Progress):
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


def progress(every: float = 30.0) -> Progress:
    return LineProgress(every)


def fail(e: Exception, code: int = 2) -> NoReturn:
    console.print(f"[red]error:[/red] {e}", soft_wrap=True)
    raise typer.Exit(code)



KEY_FILE = typer.Option(None, "--key-file", envvar="UNSEE_KEY_FILE", metavar="PATH",
                        help="The key the store is sealed under (default: none, a checksum; see docs/trust.md).")
LEDGER = typer.Option(None, "--ledger", envvar="UNSEE_LEDGER", metavar="PATH",
                      help="The store's ledger (default: DB.ledger beside it; see docs/trust.md).")


@contextmanager
def opened_store(db: Path, on_sqlite_error: str = "", key: Optional[Path] = None,
                 ledger: Optional[Path] = None) -> Iterator:
    """The session store at `db` (sealed under `key`, anchored by `ledger`), open for the body and
    closed however it ends; a recovery the open made is printed, and bad input, a refused store or
    an SQLite error ends the command with one line (`on_sqlite_error` is appended to the last: what
    the store still holds)."""
    from unsee.impl.store.sqlite import Store
    from unsee.model import UnseeError

    store = None
    try:
        store = Store(db, key=key, ledger=ledger)
        if store.recovered:
            console.print(f"[yellow]{store.recovered}[/yellow]")
        seen = store.recovered
        yield store
        if store.recovered != seen:  # a recovery the body's verification made (a ledger record a crash lost)
            console.print(f"[yellow]{store.recovered}[/yellow]")
    except (UnseeError, ValueError) as e:
        fail(e)
    except sqlite3.Error as e:
        fail(UnseeError(f"{db}: {e}{on_sqlite_error}"))
    finally:
        if store is not None:
            store.close()
