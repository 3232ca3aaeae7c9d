"""Seal coverage: every column of every table the store writes enters its digests.

Two checks, each shown to fail: the schema of a stored session (introspected with SQLite's
`PRAGMA table_info`, not read from the code) against `unsee.impl.store.digests.COVERAGE`, so a
column added to a table and left out of the seal is named; and every column of a stored session
edited in a copy (`unsee.specs.erasure.integrity_every_persisted_column_is_sealed`, the kit's seal
obligation), each edit refused by `verify`."""

import shutil
import sqlite3

import pytest

from unsee.impl.store import digests
from unsee.impl.store.encoding import Meta
from unsee.impl.store.kit import StoredRuntime, unsealed_columns
from unsee.model import Observation, Part
from unsee.specs import erasure as E
from unsee.specs.protocol import SpecViolation

STREAM = (Observation("memory", (Part("s1", "alpha beta"),), reply=1, tool="send"),
          Observation("user", (Part("z1", "gamma delta"),), reply=2, tool="send", compact=True),
          Observation("user", (Part("s3", "epsilon zeta"),), reply=1))


@pytest.fixture
def stored():
    """A stored session with a row in every table but `pages` (the reference keeps none): two
    committed calls, a compaction, a memory, a forget (its receipt)."""
    rt = StoredRuntime("reference")
    for o in STREAM:
        rt.step(o)
    rt.forget(["z1"])
    yield rt
    rt.close()


def test_every_column_the_store_writes_is_in_its_seal(stored):
    assert unsealed_columns(stored.path) == []
    assert set(E.schema(stored.path)) == set(digests.COVERAGE)


def test_a_column_left_out_of_the_seal_or_added_to_the_schema_is_named(stored, tmp_path):
    short = {**digests.COVERAGE, "world": ("root", ("call_id", "tool", "args"), "call_id")}
    assert unsealed_columns(stored.path, short) == [("world", "turn")]
    copy = tmp_path / "copy.db"
    shutil.copyfile(stored.path, copy)
    con = sqlite3.connect(copy)
    con.execute("ALTER TABLE receipts ADD COLUMN note TEXT")
    con.commit()
    con.close()
    assert unsealed_columns(copy) == [("receipts", "note")]


def test_every_column_of_a_stored_session_edited_is_refused(stored):
    every, filled = E.columns_with_rows(stored.path)
    assert {t for t, _ in every} - {t for t, _ in filled} == {"pages"}
    for pick in range(2):
        edited = E.integrity_every_persisted_column_is_sealed(stored.path, lambda p: accepts(stored, p), pick=pick)
        assert set(edited) == filled


def accepts(rt, path) -> bool:
    try:
        rt.verify_persisted(path)
    except Exception:  # noqa: BLE001 -- any refusal
        return False
    return True


def test_an_edit_of_a_column_outside_the_root_verifies_and_the_check_names_it(stored, monkeypatch):
    """The root leaving out world.turn (the planted `seal_leaves_out_a_column`): an edit of it verifies."""
    short = {**digests.COVERAGE, "world": ("root", ("call_id", "tool", "args"), "call_id")}
    monkeypatch.setattr(digests, "COVERAGE", short)
    monkeypatch.setattr(digests, "ROOT_ROWS", tuple(
        f"SELECT {', '.join(cols)} FROM {t}" + (f" WHERE key != '{Meta.ROOT}'" if t == "meta" else "") + f" ORDER BY {order}"
        for t, (how, cols, order) in short.items() if how == "root"))
    rt = StoredRuntime("reference")  # sealed without world.turn from its first save
    try:
        for o in STREAM:
            rt.step(o)
        with pytest.raises(SpecViolation, match=r"accepts its database with world\.turn of one row edited"):
            E.integrity_every_persisted_column_is_sealed(rt.path, lambda p: accepts(rt, p))
    finally:
        rt.close()


@pytest.mark.tiny
def test_every_column_of_a_real_models_pages_edited_is_refused():
    """tiny-llama's store keeps K/V pages (the reference's keeps none): each column of a page (its key,
    the turn it was born at, its bytes, its digest) edited in a copy is refused. A digest that left out
    `born` would let a page relabelled as born before the splice survive a forget's deletion."""
    rt = StoredRuntime("tiny-llama")
    try:
        for o in STREAM:
            rt.step(o)
        rt.forget(["z1"])
        every, filled = E.columns_with_rows(rt.path)
        pages = {c for c in filled if c[0] == "pages"}
        assert pages == {("pages", c) for c in ("key", "born", "data", "digest")}, pages
        edited = E.integrity_every_persisted_column_is_sealed(rt.path, lambda p: accepts(rt, p))
        assert pages <= set(edited)
    finally:
        rt.close()
