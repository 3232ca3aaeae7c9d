"""One writer per store, across processes and threads, and the named write points at which the
tests make a save fail, fill the disk, crash or stall (UNSEE_FAILPOINT).

The lock is an advisory `flock` on the store file itself, so a store has one lock however it is
reached (a symlink, a hard link, a relative path): the lock belongs to the file, not its name.
(SQLite's own locks are POSIX record locks on the same file; on Linux the two kinds do not
interact.)"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from contextlib import contextmanager


class Failpoint(RuntimeError):
    """Raised at a named write point when UNSEE_FAILPOINT (or Store.failpoint) names it."""


WRITE_POINTS = ("begin", "clear", "meta", "observations", "states", "artifacts", "edges", "checkpoints",
                "snapshots", "world", "pages", "receipt", "seal", "commit")


@contextmanager
def held(path, wait: bool = True):
    """Hold the writers' lock of the store file at `path`; yields True, or False without waiting
    (wait=False) when another writer holds it."""
    with open(path, "rb") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            got = True
        except BlockingIOError:
            got = False
        try:
            yield got
        finally:
            if got:
                fcntl.flock(lock, fcntl.LOCK_UN)


def reach(failpoint: str | None, name: str) -> None:
    """A save reaches write point `name`: fail, fill the disk, crash or stall there if
    `failpoint` (UNSEE_FAILPOINT) names it."""
    if failpoint == name:
        raise Failpoint(f"failpoint {name}")
    if failpoint == name + ":full":  # what SQLite raises when the disk fills up
        raise sqlite3.OperationalError("database or disk is full")
    if failpoint == name + ":kill":  # a crash, not an exception: nothing gets to clean up
        os.kill(os.getpid(), 9)
    if failpoint == name + ":sleep":  # a slow writer, for the race tests
        time.sleep(float(os.environ.get("UNSEE_FAILPOINT_SLEEP", "1")))
