"""Forgotten stays forgotten: the store attacked as an operator, a backup job and a careless script
would, each attack kept as a test (docs/trust.md says what each check defends against).

Every case ends in a clear refusal (exit 2, one `error:` line, no traceback) or in the documented
handling; none is a silent success, and none loses a forgotten state or an acknowledged step.
"""

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from unsee.impl.store import locking
from unsee.impl.store.agent import Agent, reapply
from unsee.impl.store.digests import seal
from unsee.impl.store.errors import LedgerError, RolledBack, SealKeyError, SideFileError
from unsee.impl.store.keys import NO_KEY, new_key, read_key
from unsee.impl.store.sqlite import Store, copy_store, rekey
from unsee.model import Observation, Part

ROOT = Path(__file__).resolve().parents[2]
EPISODE = ROOT / "examples" / "address.jsonl"
SECRET = b"Wallaby"
EXE = shutil.which("unsee") or str(Path(sys.executable).parent / "unsee")


def unsee(*args, env=None, timeout=600):
    p = subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **(env or {})})
    return p.returncode, p.stdout + p.stderr


def refused(code: int, out: str, *says: str) -> None:
    assert code == 2 and "error:" in out and "Traceback" not in out, out
    for s in says:
        assert s in out, (s, out)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stored(tmp_path: Path, name: str = "s.db", env=None) -> Path:
    db = tmp_path / name
    code, out = unsee("run", EPISODE, "--db", db, "--model", "reference", env=env)
    assert code == 0, out
    return db


@pytest.fixture(params=["checksum", "key"])
def sealing(request, tmp_path):
    """Run every attack on a store sealed with a checksum and on one sealed under a key."""
    if request.param == "checksum":
        return {}
    new_key(tmp_path / "seal.key")
    return {"UNSEE_KEY_FILE": str(tmp_path / "seal.key")}


# --- rollback: a backup put back ------------------------------------------------------------

def test_a_restored_backup_is_refused_everywhere_until_its_forgets_are_reapplied(tmp_path, sealing):
    db = stored(tmp_path, env=sealing)
    shutil.copy(db, tmp_path / "backup.db")  # the nightly backup: the file, not the ledger
    code, out = unsee("forget", "--db", db, "--source", "addr", env=sealing)
    assert code == 0 and SECRET not in db.read_bytes(), out
    shutil.copy(tmp_path / "backup.db", db)  # ... restored over the store
    before = sha(db)
    assert SECRET in db.read_bytes()
    for args in (("check", "--db", db), ("check", "--db", db, "--fast"), ("show", "--db", db),
                 ("forget", "--db", db, "--source", "u1")):
        code, out = unsee(*args, env=sealing)
        refused(code, out, "older state of this store", "--reapply", "1 forget(s)")
        assert sha(db) == before, f"{args[0]} wrote to a refused store"
    with pytest.raises(RolledBack, match="reapply"):
        Agent.open(db, key=sealing.get("UNSEE_KEY_FILE"))
    code, out = unsee("forget", "--db", db, "--reapply", env=sealing)
    assert code == 0 and "1 part(s)" in out, out
    assert SECRET not in db.read_bytes()
    code, out = unsee("check", "--db", db, env=sealing)
    assert code == 0 and "exact=True" in out, out


def test_a_restored_backup_with_steps_after_it_says_which_steps_are_lost(tmp_path):
    with Agent.create(tmp_path / "a.db", "reference", observations=[
            Observation("user", (Part("u1", "plan a trip"),), reply=3),
            Observation("memory", (Part("addr", "I live at 42 Wallaby Way"),))]) as agent:
        pass
    shutil.copy(tmp_path / "a.db", tmp_path / "backup.db")
    with Agent.open(tmp_path / "a.db") as agent:
        agent.forget(["addr"])
        agent.step(Observation("user", (Part("u2", "thanks"),), reply=2))
    shutil.copy(tmp_path / "backup.db", tmp_path / "a.db")
    with pytest.raises(RolledBack, match="the 1 step"):
        Agent.open(tmp_path / "a.db")
    done = reapply(tmp_path / "a.db")
    assert done["sources"] == ["addr"] and done["steps_lost"] == 1
    with Agent.open(tmp_path / "a.db") as agent:
        assert agent.check()["exact"] and agent.session.T == 2


def test_a_backup_put_back_with_a_forged_record_is_refused_by_its_tombstones(tmp_path):
    """Without a key the ledger's chain is a checksum: someone who restores the backup can append a
    record naming its root. The forget's tombstones, earlier in the ledger, still match its parts."""
    db = stored(tmp_path)
    shutil.copy(db, tmp_path / "backup.db")
    assert unsee("forget", "--db", db, "--source", "addr")[0] == 0
    shutil.copy(tmp_path / "backup.db", db)
    st = Store(db, anchored=False)
    records = st.ledger.records()
    st.ledger.append(st.meta_id, st.generation, "save", st.root(), records[-1].root, records=records)
    st.close()
    code, out = unsee("check", "--db", db, "--fast")
    refused(code, out, "forgotten at generation", "--reapply")


# --- forgery: rows edited, the store re-sealed with unsee's own digest code -------------------

def forge(db: Path, key) -> None:
    """Edit an observation and the world ledger, then re-seal every digest the way unsee does."""
    con = sqlite3.connect(db, isolation_level=None)
    body = json.loads(con.execute("SELECT body FROM observations WHERE t = 2").fetchone()[0])
    body["parts"][0][1] = body["parts"][0][1].replace("gift", "loan")
    con.execute("UPDATE observations SET body = ? WHERE t = 2", (json.dumps(body, sort_keys=True),))
    con.execute("INSERT INTO world VALUES ('call-t9', 'ship_gift', '{}', 9)")
    con.execute("BEGIN IMMEDIATE")
    seal(con, 0, key)
    con.execute("COMMIT")
    con.close()


@pytest.mark.parametrize("forger", ["checksum", "another key"])
def test_a_keyed_store_resealed_without_its_key_is_refused(tmp_path, forger):
    key = tmp_path / "seal.key"
    new_key(key)
    db = stored(tmp_path, env={"UNSEE_KEY_FILE": str(key)})
    forge(db, NO_KEY if forger == "checksum" else new_key(tmp_path / "other.key"))
    before = sha(db)
    code, out = unsee("check", "--db", db, "--fast", env={"UNSEE_KEY_FILE": str(key)})
    refused(code, out, "root digest")
    code, out = unsee("forget", "--db", db, "--source", "addr", env={"UNSEE_KEY_FILE": str(key)})
    refused(code, out, "root digest")
    assert sha(db) == before


def test_an_unkeyed_store_resealed_is_refused_by_its_ledger_and_the_tools_say_a_checksum_is_no_seal(tmp_path):
    db = stored(tmp_path)
    code, out = unsee("check", "--db", db, "--fast")
    assert code == 0 and "checksum" in out and "not a forger" in out, out
    forge(db, NO_KEY)
    refused(*unsee("check", "--db", db, "--fast"), "not a state its ledger")


def test_a_store_opened_with_the_wrong_key_or_none_is_refused(tmp_path):
    key, other = tmp_path / "a.key", tmp_path / "b.key"
    new_key(key)
    new_key(other)
    db = stored(tmp_path, env={"UNSEE_KEY_FILE": str(key)})
    refused(*unsee("check", "--db", db, "--fast"), "sealed under a key")
    refused(*unsee("check", "--db", db, "--fast", env={"UNSEE_KEY_FILE": str(other)}), "not the key given")
    plain = stored(tmp_path, "plain.db")
    refused(*unsee("check", "--db", plain, "--fast", env={"UNSEE_KEY_FILE": str(key)}), "sealed without a key")
    with pytest.raises(SealKeyError):
        Store(db, key=other)


def test_a_key_rotates_and_the_old_key_then_opens_nothing(tmp_path):
    old, new = tmp_path / "old.key", tmp_path / "new.key"
    new_key(old)
    new_key(new)
    db = stored(tmp_path, env={"UNSEE_KEY_FILE": str(old)})
    assert unsee("forget", "--db", db, "--source", "addr", env={"UNSEE_KEY_FILE": str(old)})[0] == 0
    done = rekey(db, old, new)
    assert done["seal"] == read_key(new).id
    refused(*unsee("check", "--db", db, "--fast", env={"UNSEE_KEY_FILE": str(old)}), "not the key given")
    code, out = unsee("check", "--db", db, env={"UNSEE_KEY_FILE": str(new)})
    assert code == 0 and "exact=True" in out, out


# --- the ledger itself --------------------------------------------------------------------------

def test_an_altered_missing_or_foreign_ledger_is_refused(tmp_path):
    a, b = stored(tmp_path, "a.db"), stored(tmp_path, "b.db")
    ledger = Path(str(a) + ".ledger")
    text = ledger.read_text()
    ledger.write_text(text.replace('"kind": "create"', '"kind": "save"'))
    refused(*unsee("check", "--db", a, "--fast"), "does not check at record 0")
    ledger.unlink()
    refused(*unsee("check", "--db", a, "--fast"), "no ledger")
    shutil.copy(str(b) + ".ledger", ledger)
    refused(*unsee("check", "--db", a, "--fast"), "ledger of another store")
    with pytest.raises(LedgerError):
        Store(a).verify()


def test_a_save_whose_ledger_record_was_lost_to_a_crash_is_recorded_on_the_next_open(tmp_path):
    db = stored(tmp_path)
    # killed after the transaction committed, before the ledger record was appended
    code, out = unsee("forget", "--db", db, "--source", "addr", env={"UNSEE_FAILPOINT": "commit:kill"})
    assert code == -signal.SIGKILL
    records = Path(str(db) + ".ledger").read_text().splitlines()
    code, out = unsee("check", "--db", db)
    said = " ".join(out.split())  # rich wraps lines where the path's length puts them
    assert code == 0 and "exact=True" in said and "record was appended now" in said, out
    assert "had committed before its process died" in said and SECRET not in db.read_bytes()
    after = Path(str(db) + ".ledger").read_text().splitlines()
    assert len(after) == len(records) + 1 and json.loads(after[-1])["tombstones"]  # the forget's, recovered


# --- side files that are not the store's --------------------------------------------------------

def test_a_stale_wal_of_another_store_is_refused_and_the_store_is_untouched(tmp_path):
    db, other = stored(tmp_path, "s.db"), stored(tmp_path, "other.db")
    con = sqlite3.connect(other, isolation_level=None)
    con.execute("PRAGMA journal_mode = WAL")
    con.execute("PRAGMA wal_autocheckpoint = 0")
    con.execute("UPDATE meta SET value = value WHERE key = 'model'")  # a frame in other.db-wal
    shutil.copy(str(other) + "-wal", str(db) + "-wal")
    shutil.copy(str(other) + "-shm", str(db) + "-shm")
    con.close()
    before = sha(db)
    for args in (("check", "--db", db, "--fast"), ("forget", "--db", db, "--source", "addr"), ("show", "--db", db)):
        refused(*unsee(*args), f"{db}-wal", "Remove it")
        assert sha(db) == before
    with pytest.raises(SideFileError):
        Store(db)


def hot_journal(db: Path) -> bytes:
    """A rollback journal left by a writer of `db` that died mid-transaction (its bytes)."""
    code = ("import sqlite3, os\n"
            f"c = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
            "c.execute('PRAGMA cache_size = 1')\n"
            "c.execute('BEGIN IMMEDIATE')\n"
            "c.execute(\"UPDATE observations SET body = body || ' '\")\n"
            "c.execute(\"UPDATE deltas SET body = body || ' '\")\n"
            "os._exit(9)\n")
    subprocess.run([sys.executable, "-c", code], check=False)
    return Path(str(db) + "-journal").read_bytes()


def test_a_hot_journal_of_another_store_is_never_replayed(tmp_path):
    db = stored(tmp_path, "s.db")
    other = tmp_path / "other.db"  # another session: its pages hold other bytes than this store's
    episode = tmp_path / "other.jsonl"
    episode.write_text(EPISODE.read_text().replace("gift", "bike").replace("Wallaby", "Kangaroo"))
    assert unsee("run", episode, "--db", other, "--model", "reference")[0] == 0
    journal = hot_journal(other)
    assert journal, "the other store's writer left a hot journal"
    Path(str(db) + "-journal").write_bytes(journal)
    before = sha(db)
    refused(*unsee("check", "--db", db, "--fast"), f"{db}-journal", "does not belong")
    assert sha(db) == before


def test_a_hot_journal_of_the_store_itself_is_rolled_back_as_sqlite_would(tmp_path):
    db = stored(tmp_path)
    hot_journal(db)
    code, out = unsee("check", "--db", db)
    assert code == 0 and "exact=True" in out, out
    assert not Path(str(db) + "-journal").exists() or Path(str(db) + "-journal").stat().st_size == 0


# --- one lock per file ---------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["symlink", "hard link", "relative path"])
def test_a_store_has_one_lock_however_it_is_reached(tmp_path, how, monkeypatch):
    db = stored(tmp_path)
    other = tmp_path / "alias.db"
    if how == "symlink":
        other.symlink_to(db)
    elif how == "hard link":
        os.link(db, other)
    else:
        monkeypatch.chdir(tmp_path)
        other = Path("s.db")
    with locking.held(db) as got:
        assert got
        with locking.held(other, wait=False) as second:
            assert not second, f"a second writer took the lock through a {how}"


def test_a_hard_link_finds_no_ledger_by_its_own_name_and_says_to_give_it(tmp_path):
    """A symlink resolves to the store's own name, so its ledger is found; a hard link is another
    name of the same file, whose default ledger (NAME.ledger) is not there: the open is refused with
    what to do, and succeeds with the store's ledger given."""
    db = stored(tmp_path)
    os.link(db, tmp_path / "alias.db")
    code, out = unsee("show", "--db", tmp_path / "alias.db")
    assert code == 2 and "--ledger" in out and "Traceback" not in out, out
    code, out = unsee("show", "--db", tmp_path / "alias.db", "--ledger", str(db) + ".ledger")
    assert code == 0, out


def test_a_forget_through_a_symlink_waits_for_a_step_through_the_real_path(tmp_path):
    db = stored(tmp_path)
    (tmp_path / "link.db").symlink_to(db)
    env = {"UNSEE_FAILPOINT": "begin:sleep", "UNSEE_FAILPOINT_SLEEP": "1.5"}
    p = subprocess.Popen([EXE, "forget", "--db", str(tmp_path / "link.db"), "--source", "addr"],
                         env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(0.5)
    with Agent.open(db) as agent:  # waits for the forget, then steps from the forgotten session
        agent.step(Observation("user", (Part("u9", "anything else?"),), reply=2))
    out = p.communicate(timeout=120)[0]
    assert p.returncode == 0, out
    with Agent.open(db) as agent:
        assert agent.session.T == 8 and agent.check()["exact"]
        assert "addr" not in {src for o in agent.session.observations for src in o.sources}


# --- crashes and failures ---------------------------------------------------------------------------

@pytest.mark.parametrize("at", ["during the steps", "commit:kill", "ledger:kill"])
def test_a_run_killed_leaves_nothing_at_its_path_and_the_next_run_completes(tmp_path, at):
    db = tmp_path / "s.db"
    long = tmp_path / "long.jsonl"
    long.write_text(EPISODE.read_text() * 6)  # long enough to kill it midway on tiny-llama
    if at == "during the steps":
        p = subprocess.Popen([EXE, "run", str(long), "--db", str(db), "--model", "tiny-llama"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(4)
        p.send_signal(signal.SIGKILL)
        p.wait()
    else:
        code, _ = unsee("run", EPISODE, "--db", db, "--model", "reference", env={"UNSEE_FAILPOINT": at})
        assert code == -signal.SIGKILL
    assert not db.exists(), "a run that died left a store at its path"
    code, out = unsee("run", EPISODE, "--db", db, "--model", "reference")
    assert code == 0, out
    assert not Path(str(db) + ".partial").exists()
    code, out = unsee("check", "--db", db)
    assert code == 0 and "exact=True" in out, out


@pytest.mark.parametrize("failpoint", ["begin:full", "meta:full", "pages:full", "seal:full"])
def test_a_forget_that_fails_on_a_full_disk_leaves_the_store_byte_identical(tmp_path, failpoint):
    db = stored(tmp_path)
    before, ledger = sha(db), Path(str(db) + ".ledger").read_bytes()
    code, out = unsee("forget", "--db", db, "--source", "addr", env={"UNSEE_FAILPOINT": failpoint})
    refused(code, out, "disk is full", "nothing was changed")
    assert sha(db) == before and Path(str(db) + ".ledger").read_bytes() == ledger
    assert not Path(str(db) + ".unsee-intent").exists()
    assert unsee("check", "--db", db)[0] == 0


def test_copies_with_their_ledger_are_the_same_session(tmp_path):
    db = stored(tmp_path)
    copy_store(db, tmp_path / "copy.db")
    assert unsee("forget", "--db", tmp_path / "copy.db", "--source", "addr")[0] == 0
    assert unsee("check", "--db", db, "--fast")[0] == 0  # the original is untouched, and still its ledger's


def test_bench_trust_times_each_save_and_counts_one_ledger_record_per_save():
    """`unsee bench trust` on the reference model: one ledger record per save, a forget of T−τ+1
    transitions, and every timed part measured (the seconds are reported, not asserted)."""
    from unsee.impl.experiments.bench_trust import PARTS, trust_costs
    from unsee.impl.experiments.reports import trust_report

    doc = trust_costs(model="reference", T=7, tau=3, turns=12, repeats=1)
    assert [r["keyed"] for r in doc["runs"]] == [True, False]
    for run in doc["runs"]:
        assert run["steps"] == 6 and run["forget"]["transitions"] == 7 - 3 + 1
        assert run["forget"]["append_s"] > 0 and run["step_mean"]["append_s"] > 0 and run["forget"]["seal_s"] > 0
        assert set(f"{p}_s" for p in PARTS) <= set(run["forget"])
    assert doc["open"]["records"] == 12 and doc["open"]["turns"] == 12
    assert len(trust_report(doc)) == 2
