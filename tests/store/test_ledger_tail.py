"""A ledger append costs the same at the 10th record and the 10,000th: it checks the chain's tail,
not the whole chain, as long as the file ends where this Ledger left it; the whole chain is
checked whenever it is read (open, check), and a file another writer appended to is read whole.

Counted, not timed: the bytes a Ledger reads of its file per append."""

import os
import tempfile
from pathlib import Path

import pytest

from unsee.impl.store.errors import LedgerError
from unsee.impl.store.keys import SealKey
from unsee.impl.store.ledger import TAIL_READ, Ledger, tombstoned

KEY = SealKey(b"k" * 32)


@pytest.fixture
def folder():
    """In memory where the machine has a tmpfs (10,000 appends each fsync their record)."""
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(dir=shm) as d:
        yield Path(d)


def append(led: Ledger, n: int, stones=()) -> None:
    led.append("s1", n, "create" if n == 0 else "step", f"root{n}", f"root{n - 1}" if n else "", stones)


def test_the_bytes_an_append_reads_do_not_grow_with_the_ledger(folder):
    led = Ledger(folder / "a.ledger", KEY)
    per_append = {}
    for n in range(10_000):
        before = led.bytes_read
        append(led, n, [("id%d" % n, "c%d" % n)] if n % 1000 == 7 else ())
        if n in (10, 1_000, 9_999):
            per_append[n] = led.bytes_read - before
    assert all(0 < b <= 2 * TAIL_READ for b in per_append.values()), per_append
    assert max(per_append.values()) - min(per_append.values()) <= 64, per_append  # one record's line, give or take
    records = Ledger(folder / "a.ledger", KEY).records()  # read whole: the chain the appends built checks
    assert len(records) == 10_000 and led.tail().seq == 10_000
    assert led.tail().stones == tombstoned(records)


def test_an_append_after_another_writer_reads_the_chain_whole_and_continues_it(folder):
    path = folder / "a.ledger"
    mine, other = Ledger(path, KEY), Ledger(path, KEY)
    for n in range(5):
        append(mine, n)
    other.records()
    append(other, 5)  # the file no longer ends where `mine` left it
    before = mine.bytes_read
    append(mine, 6)
    assert mine.bytes_read - before >= path.stat().st_size - 400  # it read the file whole
    assert [r.seq for r in Ledger(path, KEY).records()] == list(range(7))


def test_an_altered_record_is_still_found_where_the_chain_is_read_whole(folder):
    path = folder / "a.ledger"
    led = Ledger(path, KEY)
    for n in range(20):
        append(led, n)
    lines = path.read_text().splitlines(keepends=True)
    lines[3] = lines[3].replace('"root3"', '"rootX"')
    path.write_text("".join(lines))
    with pytest.raises(LedgerError, match="does not check at record 3"):
        Ledger(path, KEY).records()


def test_an_append_after_the_last_record_was_altered_or_the_file_cut_reads_the_chain_whole(folder):
    """The tail check compares the last line byte for byte at the size it had: an edit of the last
    record that keeps its length, or a file cut short, sends the append to a whole read, which refuses."""
    path = folder / "a.ledger"
    led = Ledger(path, KEY)
    for n in range(5):
        append(led, n)
    lines = path.read_text().splitlines(keepends=True)
    lines[-1] = lines[-1].replace('"root4"', '"rootX"')  # same length
    path.write_text("".join(lines))
    with pytest.raises(LedgerError, match="does not check at record 4"):
        append(led, 5)
    led2 = Ledger(path.with_name("b.ledger"), KEY)
    for n in range(5):
        append(led2, n)
    blob = led2.path.read_bytes()
    led2.path.write_bytes(blob[: blob.rindex(b"\n", 0, len(blob) - 1) + 1])  # the last record cut off
    before = led2.bytes_read
    append(led2, 4)  # the chain is read whole (4 records) and continued from it
    assert led2.bytes_read - before >= len(blob) // 2
    assert [r.seq for r in Ledger(led2.path, KEY).records()] == list(range(5))
