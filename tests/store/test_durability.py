"""Crash-safe, erasing, idempotent forgetting on the SQLite store (reference engine: fast)."""

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from typer.testing import CliRunner

from unsee.impl.store.agent import open_runtime
from unsee.impl.cli import app
from unsee.impl.store.episode import write_episode
from unsee.impl.store.errors import StoreError
from unsee.impl.store.locking import WRITE_POINTS, Failpoint
from unsee.impl.store.sqlite import Store
from unsee.model import Config, Observation, Part
from unsee.specs.reference import ReferenceRuntime

runner = CliRunner()
SECRET = "zanzibar quokka 7731"


def episode(n_turns: int = 12, secret: str = SECRET, at: int = 3) -> list[Observation]:
    obs = [Observation("system", (Part("sys", "you are an agent"),))]
    for t in range(2, n_turns + 1):
        if t == at:
            obs.append(Observation("memory", (Part("z", f"the code is {secret}"),)))
        else:
            obs.append(Observation("user", (Part(f"u{t}", f"turn {t} please help"),), reply=3,
                                   tool="send" if t % 4 == 0 else None, compact=(t == n_turns - 1)))
    return obs


def make_store(tmp_path, obs, name="s.db") -> Path:
    ep = tmp_path / f"{name}.jsonl"
    write_episode(ep, obs)
    db = tmp_path / name
    res = runner.invoke(app, ["run", str(ep), "--db", str(db), "--model", "reference"])
    assert res.exit_code == 0, res.output
    return db


def snapshot(db: Path) -> dict:
    st = Store(db)
    try:
        return {"head": st.meta("chain_head"), "digests": st.meta("digests"),
                "world": [r[0] for r in st.db.execute("SELECT call_id FROM world")]}
    finally:
        st.close()


def persisted_bytes(db: Path) -> bytes:
    out = b""
    for suffix in ("", "-journal", "-wal", "-shm"):
        p = Path(str(db) + suffix)
        if p.exists():
            out += p.read_bytes()
    return out


def session_bytes(db: Path) -> int:
    """Bytes of the stored session itself: every table but the receipts, which accumulate."""
    con = sqlite3.connect(db)
    try:
        total = 0
        for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT IN "
                                    "('receipts', 'sqlite_sequence')"):
            cols = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
            total += con.execute(f"SELECT COALESCE(SUM({' + '.join(f'LENGTH({c})' for c in cols)}), 0) "
                                 f"FROM {table}").fetchone()[0]
        return total
    finally:
        con.close()


def check_ok(db: Path) -> None:
    res = runner.invoke(app, ["check", "--db", str(db)])
    assert res.exit_code == 0, res.output


@pytest.mark.tiny
@pytest.mark.parametrize("point", WRITE_POINTS)
def test_failure_at_every_write_point_leaves_old_or_new(tmp_path, point):
    db = make_store(tmp_path, episode())
    old = snapshot(db)
    store = Store(db)
    store.failpoint = point
    rt = open_runtime(store)
    with pytest.raises(Failpoint):
        with store.exclusive("B7"):
            rt.forget(["z"])
            store.save(rt.session, "reference", rt.model, dict(rt.digest()), {"digests": dict(rt.digest())})
    store.close()
    now = snapshot(db)
    if point == "commit":  # the transaction had committed: the new state is there
        assert now["head"] != old["head"]
    else:
        assert now == old
    check_ok(db)
    assert len(now["world"]) == len(set(now["world"]))  # no side effect recorded twice


@pytest.mark.heavy
def test_kill_9_at_random_moments_never_leaves_a_half_state(tmp_path):
    rng = random.Random(7)
    exe = str(Path(sys.executable).parent / "unsee")
    done = make_store(tmp_path, episode(40), name="done.db")
    res = runner.invoke(app, ["forget", "--db", str(done), "--source", "z"])  # the same forget, never killed
    assert res.exit_code == 0, res.output
    new = snapshot(done)
    for i in range(8):
        db = make_store(tmp_path, episode(40), name=f"k{i}.db")
        old = snapshot(db)
        assert old != new
        p = subprocess.Popen([exe, "forget", "--db", str(db), "--source", "z"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.2, 1.6))
        p.send_signal(signal.SIGKILL)
        p.wait()
        st = Store(db)  # reopening rolls back an interrupted forget and says so
        recovered = st.recovered
        st.close()
        now = snapshot(db)
        assert now in (old, new), f"kill {i} left a store that is neither the old session nor the forgotten one"
        if now == old and recovered is None:
            assert p.returncode == -signal.SIGKILL
        check_ok(db)
        assert len(now["world"]) == len(set(now["world"]))


@pytest.mark.tiny
@settings(max_examples=12, deadline=None)
@given(n=st.integers(4, 14), at=st.integers(2, 4), secret=st.sampled_from(
    ["zanzibar quokka 7731", "DE44500105175407324931", "12 Albatross Lane, Hobart"]))
def test_no_persisted_byte_holds_the_target_after_forget(tmp_path_factory, n, at, secret):
    tmp = tmp_path_factory.mktemp("erase")
    db = make_store(tmp, episode(n, secret, min(at, n)))
    assert secret.encode() in persisted_bytes(db)  # the test can fail: the secret was stored
    res = runner.invoke(app, ["forget", "--db", str(db), "--source", "z"])
    assert res.exit_code == 0, res.output
    blob = persisted_bytes(db)
    for v in (secret, secret.lower(), secret.upper(), secret.replace(" ", "")):
        assert v.encode() not in blob
    receipts = Store(db).receipts()
    assert secret not in json.dumps(receipts)


@pytest.mark.tiny
def test_agentdojo_injection_is_erased_from_the_store(tmp_path):
    pytest.importorskip("agentdojo")
    from unsee.impl.experiments.agentdojo import TARGET, convert

    ep = convert("banking", "user_task_0", "injection_task_0")
    db = make_store(tmp_path, ep.observations)
    needle = "US133000000121212121212"
    assert needle.encode() in persisted_bytes(db)
    res = runner.invoke(app, ["forget", "--db", str(db), "--source", TARGET])
    assert res.exit_code == 0, res.output
    assert needle.encode() not in persisted_bytes(db)
    check_ok(db)


@pytest.mark.tiny
def test_concurrent_forgets_are_serialized(tmp_path):
    obs = episode(20)
    obs.insert(8, Observation("memory", (Part("y", "second secret 4455"),)))
    db = make_store(tmp_path, obs)
    exe = str(Path(sys.executable).parent / "unsee")
    procs = [subprocess.Popen([exe, "forget", "--db", str(db), "--source", s], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for s in ("z", "y")]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    st = Store(db)
    assert st.is_forgotten("z") and st.is_forgotten("y") and len(st.receipts()) == 2
    st.close()
    check_ok(db)


@pytest.mark.tiny
def test_tampered_log_is_named(tmp_path):
    db = make_store(tmp_path, episode())
    con = sqlite3.connect(db)
    body = json.loads(con.execute("SELECT body FROM observations WHERE t = 5").fetchone()[0])
    body["parts"][0][1] = "something else"
    con.execute("UPDATE observations SET body = ? WHERE t = 5", (json.dumps(body),))
    con.commit()
    con.close()
    res = runner.invoke(app, ["check", "--db", str(db)])
    assert res.exit_code == 2 and "observations row(s) of turn 5 do not match their digest" in res.output


@pytest.mark.tiny
def test_tampered_receipt_is_named(tmp_path):
    db = make_store(tmp_path, episode())
    assert runner.invoke(app, ["forget", "--db", str(db), "--source", "z"]).exit_code == 0
    con = sqlite3.connect(db)
    n, body = con.execute("SELECT n, body FROM receipts").fetchone()
    doc = json.loads(body)
    doc["digests"]["kv"] = "0" * 16
    con.execute("UPDATE receipts SET body = ? WHERE n = ?", (json.dumps(doc), n))
    con.commit()
    con.close()
    res = runner.invoke(app, ["check", "--db", str(db)])
    assert res.exit_code == 2 and "receipts do not match the store's root digest" in res.output


@pytest.mark.tiny
def test_bad_stores_get_clear_errors(tmp_path):
    db = make_store(tmp_path, episode())
    con = sqlite3.connect(db)
    con.execute("UPDATE meta SET value = '99' WHERE key = 'format'")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="newer unsee"):
        Store(db)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not an unsee store"):
        Store(garbage)
    with pytest.raises(StoreError, match="no session store"):
        Store(tmp_path / "missing.db")
    db2 = make_store(tmp_path, episode(), name="m.db")
    res = runner.invoke(app, ["forget", "--db", str(db2), "--source", "z", "--model", "tiny-llama"])
    assert res.exit_code == 2 and "was run on 'reference'" in res.output


@pytest.mark.slow
def test_soak_long_session_with_many_forgets(tmp_path):
    """200 turns, a secret every 10 turns, forgotten one at a time through the store; every
    forget exact against a full reset; the store stays proportional to the session."""
    obs = [Observation("system", (Part("sys", "you are an agent"),))]
    secrets_ = []
    for t in range(2, 201):
        if t % 10 == 0:
            src = f"z{t}"
            secrets_.append(src)
            obs.append(Observation("memory", (Part(src, f"secret number {t} is qx{t}v"),)))
        else:
            obs.append(Observation("user", (Part(f"u{t}", f"turn {t}"),), reply=2,
                                   tool="send" if t % 7 == 0 else None, compact=(t % 50 == 0)))
    db = make_store(tmp_path, obs)
    sizes = []
    for src in secrets_:
        res = runner.invoke(app, ["forget", "--db", str(db), "--source", src])
        assert res.exit_code == 0, res.output
        sizes.append(session_bytes(db))
    check_ok(db)
    st = Store(db)
    rt = open_runtime(st)
    twin = ReferenceRuntime(Config())
    for o in rt.session.observations:
        twin.step(o)
    assert json.loads(st.meta("digests")) == twin.digest()
    assert len(st.receipts()) == len(secrets_) == 20
    assert max(sizes) <= 1.05 * sizes[0]  # forgetting never grows the session (receipts accumulate apart)
    blob = persisted_bytes(db)
    assert not any(f"qx{t}v".encode() in blob for t in range(10, 201, 10))


@pytest.mark.tiny
@pytest.mark.parametrize("point", ["clear", "states", "receipt"])
def test_process_killed_mid_write_is_rolled_back_and_reported(tmp_path, point):
    db = make_store(tmp_path, episode())
    old = snapshot(db)
    exe = str(Path(sys.executable).parent / "unsee")
    p = subprocess.run([exe, "forget", "--db", str(db), "--source", "z"], capture_output=True, text=True,
                       env={**os.environ, "UNSEE_FAILPOINT": f"{point}:kill"}, timeout=120)
    assert p.returncode == -signal.SIGKILL
    st = Store(db)
    assert st.recovered is not None and "rolled back" in st.recovered
    st.close()
    assert snapshot(db) == old
    check_ok(db)
    res = runner.invoke(app, ["forget", "--db", str(db), "--source", "z"])  # and the forget can be redone
    assert res.exit_code == 0, res.output
    check_ok(db)


from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule  # noqa: E402

from unsee.specs.harness import present_targets  # noqa: E402
from unsee.specs.strategies import observations as obs_strategy  # noqa: E402


class StoreWithCrashes(RuleBasedStateMachine):
    """Forgets on a stored session, with crashes at random write points between them."""

    @initialize(stream=st.lists(obs_strategy(), min_size=1, max_size=6), z=st.sampled_from(["z1", "z2"]))
    def start(self, stream, z):
        import tempfile

        self.dir = Path(tempfile.mkdtemp())
        stream.insert(len(stream) // 2, Observation("memory", (Part(z, "secret qq11"),)))
        self.db = make_store(self.dir, stream)

    def _forget(self, src, point=None):
        store = Store(self.db)
        store.failpoint = point
        rt = open_runtime(store)
        try:
            with store.exclusive("B7"):
                rt.forget([src])
                store.save(rt.session, "reference", rt.model, dict(rt.digest()), {"digests": dict(rt.digest())})
        finally:
            store.close()

    def _present(self):
        store = Store(self.db)
        try:
            return present_targets(open_runtime(store).session.observations)
        finally:
            store.close()

    @precondition(lambda self: hasattr(self, "db") and self._present())
    @rule(point=st.sampled_from(WRITE_POINTS[:-1]), data=st.data())
    def crash_during_forget(self, point, data):
        before = snapshot(self.db)
        src = data.draw(st.sampled_from(self._present()))
        with pytest.raises(Failpoint):
            self._forget(src, point)
        assert snapshot(self.db) == before, f"a crash at {point} changed the store"

    @precondition(lambda self: hasattr(self, "db") and self._present())
    @rule(data=st.data())
    def forget(self, data):
        self._forget(data.draw(st.sampled_from(self._present())))

    @precondition(lambda self: hasattr(self, "db"))
    @rule()
    def reopen(self):
        Store(self.db).close()  # always possible, also once every target is forgotten

    @invariant()
    def store_is_exact_and_undoubled(self):
        if not hasattr(self, "db"):
            return
        check_ok(self.db)
        w = snapshot(self.db)["world"]
        assert len(w) == len(set(w))


TestStoreWithCrashes = StoreWithCrashes.TestCase
TestStoreWithCrashes.pytestmark = [pytest.mark.tiny]
TestStoreWithCrashes.settings = settings(max_examples=8, stateful_step_count=5, deadline=None)
