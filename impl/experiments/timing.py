"""Seconds spent inside named functions while a benchmark runs: the functions are patched where
their callers look them up, for the duration of a `with`, and put back after."""

from __future__ import annotations

import time
from contextlib import contextmanager


class Stopwatch:
    """Seconds (and calls) per name, summed while `timing()` routes functions through it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def wrap(self, name: str, fn):
        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
                self.calls[name] = self.calls.get(name, 0) + 1
        return timed

    def take(self) -> tuple[dict[str, float], dict[str, int]]:
        """What was summed since the last take, and start again from zero."""
        s, c = self.seconds, self.calls
        self.seconds, self.calls = {}, {}
        return s, c


@contextmanager
def timing(watch: Stopwatch, targets):
    """Route each `(owner, attribute, name)` of `targets` through `watch` under `name` (several may
    share a name: their seconds add up)."""
    saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in targets]
    try:
        for (owner, attr, fn), (_, _, name) in zip(saved, targets):
            setattr(owner, attr, watch.wrap(name, fn))
        yield watch
    finally:
        for owner, attr, fn in saved:
            setattr(owner, attr, fn)
