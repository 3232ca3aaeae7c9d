"""The store's format: linear growth, and stores of older formats refused untouched."""

import copy
import json
import pickle
import random
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.store.test_cli_store import EPISODE, unsee
from unsee.impl.engine.kv_runtime import make_runtime
from unsee.impl.store.agent import open_runtime
from unsee.impl.experiments.bench_store import store_session
from unsee.impl.store.sqlite import Store

FORMAT1 = Path(__file__).parent.parent / "data" / "format1-address.db"  # `unsee run examples/address.jsonl`, format 1


def stored_bytes(tmp_path, T: int) -> int:
    rt = make_runtime("reference")
    for o in store_session(T, T - 11):
        rt.step(o)
    db = tmp_path / f"T{T}.db"
    st = Store(db, create=True)
    st.save(rt.session, "reference", rt.model, dict(rt.digest()))
    st.close()
    return db.stat().st_size


def test_bytes_per_turn_do_not_grow_with_the_session(tmp_path):
    short, long = stored_bytes(tmp_path, 100) / 100, stored_bytes(tmp_path, 400) / 400
    assert long <= 8_000  # the bar at T=800 on the reference model
    assert long <= 1.1 * short, (short, long)  # format 1 grew ~4x over this range


def test_a_format_1_store_is_refused_untouched_with_the_command_that_re_runs_it(tmp_path):
    """Its transitions predate JSON tool calls: they are not this F's, so nothing migrates them."""
    db = tmp_path / "old.db"
    shutil.copy(FORMAT1, db)
    before = db.read_bytes()
    p = unsee("check", "--db", db, check=False)
    out = p.stdout + p.stderr
    assert p.returncode == 2 and "format 1" in out and "unsee run EPISODE" in out, out
    assert "Traceback" not in out
    assert db.read_bytes() == before
    new = tmp_path / "new.db"
    unsee("run", EPISODE, "--db", new, "--model", "reference")
    unsee("forget", "--db", new, "--source", "addr")
    unsee("check", "--db", new)


def stored_and_opened(tmp_path, T: int):
    """A session of T turns, the target 12 from the end, run live and stored: the store, a
    runtime opened on it, and the live runtime that wrote it."""
    rt = make_runtime("reference")
    for o in store_session(T, T - 11):
        rt.step(o)
    db = tmp_path / f"T{T}.db"
    Store(db, create=True).save(rt.session, "reference", rt.model, dict(rt.digest()))
    st = Store(db)
    return st, open_runtime(st), rt


def twin_of(T: int):
    """The runtime that never saw the target of `stored_and_opened(·, T)`."""
    twin = make_runtime("reference")
    for o in store_session(T, T - 11):
        twin.step(o.without(frozenset({"z"})))
    return twin


def test_a_forget_decodes_only_the_states_it_needs(tmp_path):
    """Opening a stored session builds no R_t (not even R_T); a forget 12 turns from the end builds R_c, the
    states whose recorded replies it hands the replay as drafts, and R_T: a count that does
    not grow with T. The forgotten session equals a full reset's, so nothing was skipped."""
    from unsee.impl.store.agent import forget_stored

    built = {}
    for T in (40, 160):
        st, opened, _ = stored_and_opened(tmp_path, T)
        deltas = opened.session.states.deltas
        assert len(deltas.cache) == 0  # every stored state already says its cache is absent
        live, doc = forget_stored(st, ["z"], rt=opened, head=st.root())
        built[T] = len(deltas.cache)
        assert doc["transitions"] == 12
        twin = twin_of(T)
        assert dict(live.digest()) == dict(twin.digest())
        st.close()
    assert built[40] == built[160] == 13, built  # R_c and the 12 states after it


def test_a_forget_builds_and_compares_only_the_suffixs_source_sets(tmp_path, monkeypatch):
    """Each artifact's source set is its parents' union, so it grows with the session: a load
    that built every set, or a graph digest that compared every artifact's set with its
    parents', would cost the square of T. A forget builds the sets of the few stored artifacts
    the replay reads and compares those of the artifacts it made: the same counts at T=40 and
    at T=160. The result still equals the twin's, source sets included."""
    import unsee.model.state as state_mod
    from unsee.impl.store.agent import forget_stored
    from unsee.impl.store.encoding import StoredArtifact

    compared = []
    real = state_mod.source_delta
    monkeypatch.setattr(state_mod, "source_delta", lambda a, of: compared.append(a.id) or real(a, of))
    counts = {}
    for T in (40, 160):
        st, opened, _ = stored_and_opened(tmp_path, T)
        stored = [a for a in opened.session.state.artifacts if isinstance(a, StoredArtifact) and a.parents]
        compared.clear()
        live, _ = forget_stored(st, ["z"], rt=opened, head=st.root())
        built = sum("source_ids" in a.__dict__ for a in stored)
        counts[T] = (built, len(compared))
        twin = twin_of(T)
        assert live.session.state.artifacts == twin.session.state.artifacts  # every source set too
        assert dict(live.digest()) == dict(twin.digest())
        st.close()
    assert counts[40] == counts[160], counts
    assert counts[160][0] <= 3 and counts[160][1] == 0, counts


def test_stored_source_sets_read_back_exactly_where_an_artifact_drops_a_source(tmp_path):
    """A stored artifact's set is rebuilt from its ancestors' stored deltas when first read: as
    the union of what they add, or, where one of them drops a source, each set in order. Both
    paths give back every set as saved (read from the last artifact first, so that the lazy
    path does the work), and the loaded graph digests as the saved one."""
    from dataclasses import replace

    from unsee.model.state import graph_digest

    rt = make_runtime("reference")
    for o in store_session(30, 19):
        rt.step(o)
    s = rt.session
    arts = list(s.state.artifacts)
    i = next(k for k, a in enumerate(arts) if a.turn == 20 and a.parents and "z" in a.source_ids)
    arts[i] = replace(arts[i], source_ids=arts[i].source_ids - {"z"})  # drops z; its children add it back
    edited = replace(s, states=s.states[:-1] + (replace(s.state, artifacts=tuple(arts)),))
    db = tmp_path / "drop.db"
    Store(db, create=True).save(edited, "reference", rt.model, dict(rt.digest()))
    want = [a.source_ids for a in arts]
    for order in ("reversed", "forward", "shuffled"):  # each on a fresh load: nothing read before
        back = Store(db).load(None).state.artifacts
        idx = list(range(len(back)))
        if order == "reversed":
            idx.reverse()
        elif order == "shuffled":
            random.Random(3).shuffle(idx)
        assert [back[k].source_ids for k in idx] == [want[k] for k in idx], order
    assert graph_digest(back) == graph_digest(arts) != graph_digest(s.state.artifacts)
    drops = [a for a in back if a.known_delta[2]]
    assert [a.id for a in drops] == [arts[i].id]  # the stored delta says what it drops


def test_a_forget_hands_its_freed_pages_back_and_an_open_writes_nothing(tmp_path):
    """secure_delete zeroes what a save deletes; a new store then returns the freed pages to the
    file system, so a forget leaves no free page behind. Opening a store writes nothing to it."""
    from unsee.impl.store.agent import forget_stored

    from dataclasses import replace

    rt = make_runtime("reference")
    for o in store_session(40, 29):
        if o.sources == {"z"}:  # a target of 20,000 characters: its pages are not reused by the replay
            o = replace(o, parts=(replace(o.parts[0], text="passport X4417202 " * 1100),))
        rt.step(o)
    db = tmp_path / "big.db"
    Store(db, create=True).save(rt.session, "reference", rt.model, dict(rt.digest()))
    before = db.read_bytes()
    Store(db).close()
    assert db.read_bytes() == before  # an open that only reads leaves the file as it was
    st = Store(db)
    forget_stored(st, ["z"], rt=open_runtime(st), head=st.root())
    st.close()
    assert db.stat().st_size < len(before) - 20_000  # the target's pages left the file
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA auto_vacuum").fetchone() == (2,)  # incremental
        assert con.execute("PRAGMA freelist_count").fetchone() == (0,)
    finally:
        con.close()


def test_an_artifact_copies_and_pickles_as_its_provenance_tuple_alone(tmp_path):
    """An artifact keeps its parents (`known_delta`) to digest fast; a copy or a pickle must not
    follow them through the whole ancestry (deeper than the recursion limit at T=400)."""
    st, opened, rt = stored_and_opened(tmp_path, 400)
    for a in (rt.session.state.artifacts[-1], opened.session.state.artifacts[-1]):
        for back in (pickle.loads(pickle.dumps(a)), copy.deepcopy(a), copy.copy(a)):
            assert back == a and type(back).__name__ == "Artifact" and back.known_delta is None
    st.close()


@pytest.mark.parametrize("fmt, says", [(7, ["is sealed", "a ledger outside the file"]),
                                       (6, ["holds the prompt blocks", "is sealed"]),
                                       (5, ["header and reply are one prefill", "holds the prompt blocks"]),
                                       (4, ["64-byte boundaries", "one prefill"]),
                                       (3, ["tool calls carry JSON arguments", "64-byte boundaries", "one prefill"])])
def test_an_older_store_is_refused_with_what_changed_f_since(tmp_path, fmt, says):
    """Each format since the store's is named: what it changed, and how to get a store of this one."""
    from unsee.impl.store.sqlite import StoreError

    db = tmp_path / "old.db"
    Store(db, create=True).save(make_runtime("reference").session, "reference", make_runtime("reference").model, {})
    with sqlite3.connect(db) as c:
        c.execute("UPDATE meta SET value = ? WHERE key = 'format'", (str(fmt),))
    with pytest.raises(StoreError, match=f"store of format {fmt}; this unsee writes format 8") as e:
        Store(db)
    assert all(s in str(e.value) for s in says) and "unsee run EPISODE --db NEW.db" in str(e.value)
