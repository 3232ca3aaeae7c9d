"""The audit journal: finished episodes kept on disk as JSON lines, so a stopped audit resumes
where it stopped."""

from __future__ import annotations

import json
import os
from pathlib import Path


class JournalError(ValueError):
    """A journal that belongs to another audit, or that cannot be read."""


class Journal:
    """A JSON-lines file of finished episodes. The first line names the audit (model, suite,
    seed, methods, tokens, decode, kernel, the schedule of F it ran (`pages.ROOT`), and the n
    it was started with); each later line is one
    episode: its index, its case name and its result, appended and flushed (fsync) when the
    episode finishes. Opening an existing journal refuses one written by another audit, reads the
    episodes it holds (a last line cut short by a crash is dropped) and appends from there.

    Episode i's result depends on its case and on seed + i, not on n: an audit with another n
    reuses the journal's episodes below its own n, each checked to be the same case (an audit of
    more episodes extends a journal; one of fewer reads the first of a longer run's)."""

    def __init__(self, path: Path, header: dict, names: list[str]):
        self.path, self.done = Path(path), {}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._held = self.path.open("a")  # one audit at a time: a second one would interleave its lines
        try:
            import fcntl

            fcntl.flock(self._held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # pragma: no cover - no advisory locks on this platform
            pass
        except OSError as e:
            self._held.close()
            raise JournalError(f"{self.path} is in use by another audit running now") from e
        try:
            self._open(header, names)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._held.close()  # and with it the lock

    def _open(self, header: dict, names: list[str]) -> None:
        lines = self.path.read_text().splitlines()
        if lines:
            try:
                have = json.loads(lines[0])
            except json.JSONDecodeError as e:
                raise JournalError(f"{self.path} is not an audit journal: {e}") from e
            diff = sorted(k for k in set(have) | set(header) if k != "n" and have.get(k) != header.get(k))
            if "schedule" in diff:  # another schedule of F: its episodes' replies are not this one's
                there = have.get("schedule") or "unrecorded (a journal from before journals named it)"
                raise JournalError(f"{self.path} holds episodes run under another schedule of F ({there}; this "
                                   f"unsee runs {header.get('schedule')!r}). Give a new --journal path to run "
                                   "them again (the old one stays as it is)")
            if diff:
                what = "; ".join(f"{k}: {have.get(k)!r} there, {header.get(k)!r} here" for k in diff)
                raise JournalError(f"{self.path} is the journal of another audit ({what}); "
                                   f"give another --journal path")
            keep = [lines[0]]
            for line in lines[1:]:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    break  # a line cut short by a crash: that episode runs again
                i = rec.get("i")
                if not isinstance(i, int) or i < 0:
                    raise JournalError(f"{self.path}: a line without an episode index: {line[:80]!r}")
                keep.append(line)
                if i >= len(names):
                    continue  # an episode past this audit's n: kept, not used
                if rec.get("case") != names[i]:
                    raise JournalError(f"{self.path}: its episode {i} is {rec.get('case')!r}, this audit's is "
                                       f"{names[i]!r} (at n={have.get('n')} the suite picks other episodes)")
                self.done[i] = rec["result"]
            if len(keep) < len(lines):  # drop the torn tail before appending after it
                self.path.write_text("\n".join(keep) + "\n")
        else:
            self._write(header)

    def _write(self, rec: dict) -> str:
        line = json.dumps(rec, separators=(",", ":"))
        self._held.write(line + "\n")  # the handle that holds the lock, opened for appending
        self._held.flush()
        os.fsync(self._held.fileno())
        return line

    def add(self, i: int, name: str, result: dict) -> dict:
        """Append episode i; returns its result as a resumed run reads it back."""
        return json.loads(self._write({"i": i, "case": name, "result": result}))["result"]
