"""The runtime protocol's optional persistence hooks: what a runtime keeps on disk, exposed so that
the erasure statement and the seal obligation (`unsee.specs.erasure`) judge the bytes it persists,
not its report of them. A runtime without them is checked as before; one with them gets both.

- `persisted_files()`          file name → bytes of every file the runtime persists (its store,
                               side files, ledger), read now;
- `persisted_log()`            the observation log read back from what is persisted (a fresh read,
                               e.g. the store opened again);
- `persisted_secrets(sources)` byte strings that encode the sources in the runtime's own formats
                               (token ids as it stores them, K/V rows), asked before the forget;
- `persisted_database()`       the path of the SQLite file that holds its state, or None;
- `verify_persisted(path)`     return if the runtime accepts the SQLite file at `path` (a copy of
                               its database) as it is; raise if it refuses it.

Section "What your runtime persists" of docs/verify-your-runtime.md is the contract in words;
`PERSISTENCE` is what it lists (a test keeps the two in step). The functions below call each hook
through `Checked.hook`, so an exception or a value of the wrong type is reported as any other.
"""

from __future__ import annotations

from os import PathLike
from types import MappingProxyType
from typing import Mapping

from unsee.specs.protocol import Boundary, checked, kind_of, read_list, read_observations

# member → what the kit relies on, as the guide lists them
PERSISTENCE = MappingProxyType({
    "persisted_files()": "a mapping file name → bytes: every file the runtime persists (its store, side files, "
                         "ledger), read now",
    "persisted_log()": "a list of Observation: the log read back from what is persisted (a fresh read, e.g. the "
                       "store opened again), sanitized of every source forgotten so far",
    "persisted_secrets(sources)": "a list of bytes: what encodes the sources' content in the runtime's own formats "
                                  "(token ids as it stores them, the K/V rows of blocks in I(z)), asked before the "
                                  "forget",
    "persisted_database()": "str (or a path): the SQLite file that holds the runtime's state, or None",
    "verify_persisted(path)": "return if the runtime accepts the SQLite file at `path` (a copy of its database) as "
                              "it is; raise if it refuses it or would repair it (any exception is a refusal)",
})


def read_files(value, at: Boundary) -> dict[str, bytes]:
    if not isinstance(value, Mapping):
        raise at.fail(f"persisted files as {kind_of(value)}", "persisted_files() returns a mapping file name → bytes",
                      "return e.g. {'store.db': path.read_bytes()}")
    out = {}
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, (bytes, bytearray, memoryview)):
            raise at.fail(f"persisted files with {k!r}: {kind_of(v)}", "each file name is a str and each file bytes",
                          "read each file with `read_bytes()`")
        out[k] = bytes(v)
    return out


def read_secrets(value, at: Boundary) -> tuple[bytes, ...]:
    items = read_list(value, "persisted_secrets(...)", at, "bytes")
    for i, x in enumerate(items):
        if not isinstance(x, (bytes, bytearray, memoryview)):
            raise at.fail(f"persisted_secrets(...) with item {i} as {kind_of(x)}", "each secret is bytes",
                          "encode each as the runtime persists it (e.g. `text.encode()`, a tensor's bytes)")
    return tuple(bytes(x) for x in items)


def read_database(value, at: Boundary) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (str, PathLike)):
        raise at.fail(f"a database as {kind_of(value)}", "persisted_database() returns the path of an SQLite file "
                      "(str or path) or None", "return the path of the file your runtime keeps its state in")
    return str(value)


def persisted_files(rt) -> dict[str, bytes] | None:
    """file name → bytes of what `rt` persists, or None for a runtime without the hook."""
    return checked(rt).hook("persisted_files", read_files)


def persisted_log(rt):
    return checked(rt).hook("persisted_log", lambda v, at: read_observations(v, at, "the persisted log"))


def persisted_secrets(rt, sources) -> tuple[bytes, ...] | None:
    return checked(rt).hook("persisted_secrets", read_secrets, list(sources))


def persisted_database(rt) -> str | None:
    return checked(rt).hook("persisted_database", read_database)


def accepts(rt, path) -> bool:
    """Does the runtime accept the database at `path`? Any exception it raises is a refusal."""
    try:
        checked(rt).runtime.verify_persisted(str(path))
    except Exception:  # noqa: BLE001 -- a refusal is whatever the runtime raises
        return False
    return True
