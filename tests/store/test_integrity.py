"""A store that cannot lie: every persisted byte a forget, a check or a step reads is verified.

The corruption suite, in the spirit of SQLite's: for each table and field of a stored tiny-llama
session (a compaction, a committed `send`, memory, K/V pages, one earlier forget), flip, delete,
swap or truncate, then run `unsee forget` and `unsee check --fast`. Each case must end in one of
two ways, never a silent success:

- "error": a clear error (exit 2, `error:`, no traceback) that names what is damaged, and the
  store file is byte-for-byte what it was;
- "recomputed": the damaged thing is derived data (a K/V page), the forget recomputes it from the
  verified tokens, the receipt says so, and a full-reset `check` agrees with the result.

The cases are data (CASES): a new table or field is one more row.
"""

import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from unsee.impl.cli import app
from unsee.impl.store.encoding import SCHEMA
from unsee.impl.store.sqlite import Store, copy_store

pytestmark = pytest.mark.tiny

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
EPISODE = ROOT / "examples" / "address.jsonl"


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    """A tiny-llama session, forgotten from once (so receipts and a spliced suffix exist)."""
    base = tmp_path_factory.mktemp("integrity")
    ep = base / "e.jsonl"
    lines = EPISODE.read_text().splitlines()
    lines.insert(3, json.dumps({"kind": "memory", "source": "pet", "text": "The user's cat is called Miso.",
                                "reply": 0}))
    ep.write_text("\n".join(lines) + "\n")
    db = base / "s.db"
    res = invoke("run", ep, "--db", db, "--model", "tiny-llama")
    assert res.exit_code == 0, res.output
    res = invoke("forget", "--db", db, "--source", "pet")
    assert res.exit_code == 0, res.output
    return db


def file_digest(db: Path) -> str:
    return hashlib.sha256(db.read_bytes()).hexdigest()


def flip(text: str) -> str:
    """One character changed, in the middle (a JSON text stays the same length)."""
    i = len(text) // 2
    while not text[i].isalnum():
        i += 1
    c = text[i]
    return text[:i] + ("1" if c == "0" else "0" if c.isdigit() else ("b" if c == "a" else "a")) + text[i + 1:]


def sql(*statements):
    def mutate(con):
        for s in statements:
            con.execute(s)
    return mutate


def update(table: str, column: str, where: str, fn):
    """Replace one field by fn(old value)."""
    def mutate(con):
        (old,) = con.execute(f"SELECT {column} FROM {table} WHERE {where} LIMIT 1").fetchone()
        con.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = (SELECT rowid FROM {table} WHERE {where} LIMIT 1)",
                    (fn(old),))
    return mutate


def swap(table: str, column: str, key: str, a: str, b: str):
    """Swap one column between two rows (same length: a damaged page index, two rows reordered)."""
    def mutate(con):
        (va,) = con.execute(f"SELECT {column} FROM {table} WHERE {key} = {a}").fetchone()
        (vb,) = con.execute(f"SELECT {column} FROM {table} WHERE {key} = {b}").fetchone()
        con.execute(f"UPDATE {table} SET {column} = ? WHERE {key} = {a}", (vb,))
        con.execute(f"UPDATE {table} SET {column} = ? WHERE {key} = {b}", (va,))
    return mutate


def flip_bit(blob: bytes) -> bytes:
    b = bytearray(blob)
    b[len(b) // 3] ^= 0x10
    return bytes(b)


def first_page_born(before: int):
    return f"key = (SELECT key FROM pages WHERE born < {before} ORDER BY born, key LIMIT 1)"


def swap_pages(con):
    """Two same-length pages, one read by the forget, exchange their bytes (digests stay with the keys)."""
    rows = con.execute("SELECT key, data FROM pages WHERE born < 6 ORDER BY born, key").fetchall()
    by_len = {}
    for k, d in rows:
        by_len.setdefault(len(d), []).append((k, d))
    (ka, da), (kb, db_) = next(v for v in by_len.values() if len(v) >= 2)[:2]
    con.execute("UPDATE pages SET data = ? WHERE key = ?", (db_, ka))
    con.execute("UPDATE pages SET data = ? WHERE key = ?", (da, kb))


def meta(key: str, fn):
    return update("meta", "value", f"key = '{key}'", fn)


def other_model_config(text: str) -> str:
    d = json.loads(text)
    d["summary_tokens"] += 1
    return json.dumps(d)


def change_sources(text: str) -> str:
    d = json.loads(text)
    d["+"] = sorted(set(d["+"]) | {"u1"}) if d["+"] != ["u1"] else ["u2"]
    return json.dumps(d)


def change_args(text: str) -> str:
    return json.dumps([x + 1 if isinstance(x, int) else x + "!" for x in json.loads(text)] or [1])


ERROR, RECOMPUTED = "error", "recomputed"
# (name, mutation, outcome, what the message must say)
CASES = [
    # meta: every key a state depends on
    ("meta.model to another family", meta("model", lambda v: "tiny-qwen2"), ERROR, "root digest"),
    ("meta.config summary_tokens", meta("config", other_model_config), ERROR, "root digest"),
    ("meta.policy", meta("policy", lambda v: "none"), ERROR, "root digest"),
    ("meta.digests", meta("digests", flip), ERROR, "root digest"),
    ("meta.identity weights", meta("identity", flip), ERROR, "root digest"),
    ("meta.kv_pages layout", meta("kv_pages", flip), ERROR, "root digest"),
    ("meta.forgotten", meta("forgotten", flip), ERROR, "root digest"),
    ("meta.chain_head", meta("chain_head", flip), ERROR, "chain head|root digest"),
    ("meta.salt", meta("salt", flip), ERROR, "root digest"),
    ("meta.root", meta("root", flip), ERROR, "root digest"),
    ("meta.salt deleted", sql("DELETE FROM meta WHERE key = 'salt'"), ERROR, "root digest"),
    ("meta.root deleted", sql("DELETE FROM meta WHERE key = 'root'"), ERROR, "root digest"),
    # the observation log
    ("observation body before tau", update("observations", "body", "t = 2", flip), ERROR, "observations row"),
    ("observation chain link", update("observations", "chain", "t = 4", flip), ERROR, "observations row"),
    ("observation deleted", sql("DELETE FROM observations WHERE t = 5"), ERROR, "observations row"),
    ("observations swapped", swap("observations", "body", "t", "1", "2"), ERROR, "observations row"),
    # deltas (R_t as what it changed)
    ("delta token before tau", update("deltas", "body", "t = 2", flip), ERROR, "deltas row"),
    ("delta deleted", sql("DELETE FROM deltas WHERE t = 6"), ERROR, "deltas row"),
    ("deltas swapped", swap("deltas", "body", "t", "5", "6"), ERROR, "deltas row"),
    # the provenance graph
    ("artifact source_ids before tau", update("artifacts", "source_ids", "turn = 2", change_sources), ERROR,
     "artifacts row"),
    ("artifact type", update("artifacts", "type", "turn = 2", lambda v: "memory"), ERROR, "artifacts row"),
    ("artifact token_span", update("artifacts", "token_span", "id = 't2.2.block'", flip), ERROR, "artifacts row"),
    ("artifact committed", update("artifacts", "committed", "turn = 5", lambda v: 1 - (v or 0)), ERROR,
     "artifacts row"),
    ("artifact deleted", sql("DELETE FROM artifacts WHERE rowid = (SELECT MIN(rowid) FROM artifacts WHERE turn = 3)"),
     ERROR, "artifacts row"),
    ("artifact moved to another turn", update("artifacts", "turn", "turn = 2", lambda v: v + 1), ERROR,
     "artifacts row"),
    ("parent edge removed", sql("DELETE FROM edges WHERE rowid = (SELECT MIN(rowid) FROM edges WHERE turn = 5)"),
     ERROR, "edges row"),
    ("edge parent changed", update("edges", "parent", "turn = 5", flip), ERROR, "edges row"),
    # checkpoints and environment snapshots
    ("checkpoint names an unknown snapshot", update("checkpoints", "body", "boundary = 2", flip), ERROR,
     "checkpoints row"),
    ("checkpoint deleted", sql("DELETE FROM checkpoints WHERE boundary = 1"), ERROR, "checkpoints row"),
    ("snapshot env", update("snapshots", "env", "1", flip), ERROR, "root digest"),
    ("snapshot deleted", sql("DELETE FROM snapshots WHERE rowid = (SELECT MIN(rowid) FROM snapshots)"), ERROR,
     "root digest"),
    # the side-effect ledger and the receipts
    ("world args", update("world", "args", "1", change_args), ERROR, "root digest"),
    ("world row deleted", sql("DELETE FROM world"), ERROR, "root digest"),
    ("world row added", sql("INSERT INTO world VALUES ('call-x', 'send', '[1]', 2)"), ERROR, "root digest"),
    ("receipt body", update("receipts", "body", "1", flip), ERROR, "root digest"),
    ("receipt deleted", sql("DELETE FROM receipts"), ERROR, "root digest"),
    # the digests themselves
    ("turn digest", update("turns", "digest", "t = 3", flip), ERROR, "digest chain"),
    ("turn rows", update("turns", "rows", "t = 3", flip), ERROR, "row"),
    ("turn digest deleted", sql("DELETE FROM turns WHERE t = 4"), ERROR, "rows of turn 4 .* not covered"),
    ("turn digest row added", sql("INSERT INTO turns VALUES (99, '{}', '" + "0" * 64 + "')"), ERROR,
     "digest of turn \\d+ is missing"),
    # K/V pages: derived from verified tokens, so recomputed and said so
    ("page bit flipped before tau", update("pages", "data", first_page_born(3), flip_bit), RECOMPUTED, ""),
    ("page 4 bytes short", update("pages", "data", first_page_born(3), lambda b: b[:-4]), RECOMPUTED, ""),
    ("pages of equal length swapped", swap_pages, RECOMPUTED, ""),
    ("page digest changed", update("pages", "digest", first_page_born(3), flip), RECOMPUTED, ""),
    ("page deleted", sql(f"DELETE FROM pages WHERE {first_page_born(3)}"), RECOMPUTED, ""),
]


@pytest.mark.parametrize("name,mutate,outcome,says", CASES, ids=[c[0] for c in CASES])
def test_corruption_is_an_error_or_an_announced_recomputation(stored, tmp_path, name, mutate, outcome, says):
    import re

    db = tmp_path / "s.db"
    copy_store(stored, db)
    con = sqlite3.connect(db)
    mutate(con)
    con.commit()
    con.close()
    before = file_digest(db)
    res = invoke("forget", "--db", db, "--source", "addr", "--json", tmp_path / "r.json")
    assert res.exception is None or isinstance(res.exception, SystemExit), (name, res.exception)
    assert "Traceback" not in res.output
    if outcome == ERROR:
        assert res.exit_code == 2 and "error:" in res.output, (name, res.output)
        assert re.search(says, res.output), (name, res.output)
        assert file_digest(db) == before, f"{name}: the refused forget changed the store"
        fast = invoke("check", "--db", db, "--fast")
        assert fast.exit_code == 2 and re.search(says, fast.output), (name, fast.output)
    else:
        assert res.exit_code == 0, (name, res.output)
        receipt = json.loads((tmp_path / "r.json").read_text())
        assert receipt["pages_recomputed"] or receipt["tokens_rematerialized"] > 0, (name, receipt)
        check = invoke("check", "--db", db)
        assert check.exit_code == 0 and "exact=True" in check.output, (name, check.output)


def test_a_damaged_page_is_named_by_the_fast_check(stored, tmp_path):
    db = tmp_path / "s.db"
    copy_store(stored, db)
    con = sqlite3.connect(db)
    update("pages", "data", first_page_born(3), flip_bit)(con)
    con.commit()
    con.close()
    res = invoke("check", "--db", db, "--fast")
    assert res.exit_code == 1 and "fails its digest" in res.output and "recomputes it" in res.output
    assert invoke("check", "--db", stored, "--fast").exit_code == 0


def test_a_page_from_a_store_of_another_model_is_never_read(tmp_path):
    """Page keys name tokens and context only: tiny-mistral and tiny-llama stores of one
    episode share them. The page digest binds the model, so a copied page is recomputed."""
    runs = {}
    for model in ("tiny-llama", "tiny-mistral"):
        db = tmp_path / f"{model}.db"
        assert invoke("run", EPISODE, "--db", db, "--model", model).exit_code == 0
        runs[model] = db
    con = sqlite3.connect(runs["tiny-llama"])
    con.execute("ATTACH DATABASE ? AS other", (str(runs["tiny-mistral"]),))
    n = con.execute("UPDATE pages SET data = (SELECT o.data FROM other.pages o WHERE o.key = pages.key), "
                    "digest = (SELECT o.digest FROM other.pages o WHERE o.key = pages.key) "
                    "WHERE key IN (SELECT key FROM other.pages) AND born < 3").rowcount
    con.commit()
    con.close()
    assert n > 0  # the keys are shared: the attack is real
    res = invoke("forget", "--db", runs["tiny-llama"], "--source", "addr", "--json", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    assert len(json.loads((tmp_path / "r.json").read_text())["pages_recomputed"]) > 0
    assert invoke("check", "--db", runs["tiny-llama"]).exit_code == 0


def test_a_truncated_file_is_never_built_on(stored, tmp_path):
    """A file cut to 99 % can pass SQLite's integrity_check; no forget builds on what is lost."""
    db = tmp_path / "s.db"
    copy_store(stored, db)
    data = db.read_bytes()
    db.write_bytes(data[: len(data) * 99 // 100])
    fast = invoke("check", "--db", db, "--fast")  # the loss is seen, never passed over
    assert fast.exit_code != 0 and "Traceback" not in fast.output, fast.output
    res = invoke("forget", "--db", db, "--source", "addr", "--json", tmp_path / "r.json")
    assert "Traceback" not in res.output and (res.exception is None or isinstance(res.exception, SystemExit))
    if res.exit_code == 0:  # what was lost was not read, or was a page and was recomputed: exact
        assert invoke("check", "--db", db).exit_code == 0
    else:
        assert res.exit_code == 2 and "error:" in res.output


def test_the_target_cannot_survive_a_forged_source_set(tmp_path):
    """`mem:addr` enters at t=3 and again at t=6; changing the first artifact's stored source
    set must not make the forget start at the second entry and leave the first in the log."""
    ep = tmp_path / "e.jsonl"
    lines = EPISODE.read_text().splitlines()
    again = json.loads(lines[2])
    lines.insert(5, json.dumps(again))
    ep.write_text("\n".join(lines) + "\n")
    db = tmp_path / "s.db"
    assert invoke("run", ep, "--db", db, "--model", "reference").exit_code == 0
    con = sqlite3.connect(db)
    aid, src = con.execute("SELECT id, source_ids FROM artifacts WHERE source_ids LIKE '%addr%' "
                           "ORDER BY ord LIMIT 1").fetchone()
    con.execute("UPDATE artifacts SET source_ids = ? WHERE id = ?", (src.replace('"addr"', '"sys"'), aid))
    con.commit()
    con.close()
    before = file_digest(db)
    res = invoke("forget", "--db", db, "--source", "addr")
    assert res.exit_code == 2 and "artifacts row(s) of turn 3" in res.output, res.output
    assert file_digest(db) == before


@pytest.mark.parametrize("kind", ["empty", "foreign sqlite", "text"])
def test_a_file_that_is_not_a_store_is_refused_before_any_write(tmp_path, kind):
    db = tmp_path / "user.db"
    if kind == "empty":
        db.write_bytes(b"")
    elif kind == "text":
        db.write_text("name,amount\nalice,3\n")
    else:
        con = sqlite3.connect(db)
        con.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, amount REAL)")
        con.execute("INSERT INTO invoices VALUES (1, 9.5)")
        con.commit()
        con.close()
    before = file_digest(db)
    for args in (["forget", "--db", db, "--source", "med"], ["check", "--db", db], ["check", "--db", db, "--fast"],
                 ["run", EPISODE, "--db", db, "--model", "reference"]):
        res = invoke(*args)
        assert res.exit_code == 2 and "error:" in res.output and "Traceback" not in res.output, (args, res.output)
        assert "not an unsee store" in res.output or "already exists" in res.output, res.output
        assert file_digest(db) == before, f"{args[0]} changed the user's {kind} file"
    assert not Path(str(db) + ".lock").exists()


def test_a_full_disk_during_a_forget_is_a_clear_error_and_the_old_session_survives(stored, tmp_path, monkeypatch):
    db = tmp_path / "s.db"
    copy_store(stored, db)
    before = file_digest(db)
    for point in ("pages", "seal"):
        monkeypatch.setenv("UNSEE_FAILPOINT", f"{point}:full")
        res = invoke("forget", "--db", db, "--source", "addr")
        assert res.exit_code == 2 and "database or disk is full" in res.output, res.output
        assert "nothing was changed" in res.output and "Traceback" not in res.output
        monkeypatch.delenv("UNSEE_FAILPOINT")
        assert invoke("check", "--db", db, "--fast").exit_code == 0
        st = Store(db)
        assert st.recovered is None  # a clean failure leaves no intent marker behind
        st.close()
    res = invoke("forget", "--db", db, "--source", "addr")
    assert res.exit_code == 0, res.output
    assert file_digest(db) != before


def test_receipts_name_sources_by_salted_digest_only(stored, tmp_path):
    db = tmp_path / "s.db"
    copy_store(stored, db)
    res = invoke("forget", "--db", db, "--source", "addr", "--json", tmp_path / "r.json")
    assert res.exit_code == 0
    assert json.loads((tmp_path / "r.json").read_text())["sources"] == ["addr"]  # the user's own request
    st = Store(db)
    bodies = [b for (b,) in st.db.execute("SELECT body FROM receipts")]
    assert len(bodies) == 2
    persisted = [json.loads(b)["sources"] for b in bodies]
    assert persisted == [[st.target_digest("pet")], [st.target_digest("addr")]]
    st.close()
    raw = db.read_bytes()
    assert b'"addr"' not in raw and b'"pet"' not in raw


def test_schema_tables_are_all_covered_by_the_suite():
    """A new table in the schema must get cases here."""
    import re

    tables = set(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", SCHEMA))
    covered = {c[0].split(".")[0].split(" ")[0] for c in CASES}
    names = {"observation": "observations", "delta": "deltas", "deltas": "deltas", "artifact": "artifacts",
             "parent": "edges", "edge": "edges", "checkpoint": "checkpoints", "snapshot": "snapshots",
             "world": "world", "receipt": "receipts", "turn": "turns", "page": "pages", "pages": "pages",
             "meta": "meta", "observations": "observations"}
    assert tables <= {names.get(c, c) for c in covered}, tables - {names.get(c, c) for c in covered}


def test_a_real_full_disk_during_a_forget_leaves_the_old_session(stored, tmp_path):
    """On a small tmpfs filled to within 8 KiB: the forget's pages and journal do not fit.
    Where mounting is not allowed, the failpoint test above raises the same SQLite error."""
    import subprocess

    mnt = tmp_path / "small"
    mnt.mkdir()
    size = 3 * stored.stat().st_size + 1024 * 1024
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:  # no root, or a container without CAP_SYS_ADMIN
        pytest.skip("mounting a tmpfs is not allowed here; the failpoint test covers a full disk")
    try:
        db = mnt / "s.db"
        copy_store(stored, db)
        filler = mnt / "filler"
        free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
        filler.write_bytes(b"\0" * max(0, free - 8 * 1024))  # leave 8 KiB: less than the forget writes
        before = file_digest(db)
        res = invoke("forget", "--db", db, "--source", "addr")
        assert res.exit_code == 2 and "error:" in res.output and "Traceback" not in res.output, res.output
        assert "full" in res.output or "disk" in res.output, res.output
        assert file_digest(db) == before
        filler.unlink()
        assert invoke("check", "--db", db).exit_code == 0
        res = invoke("forget", "--db", db, "--source", "addr")
        assert res.exit_code == 0, res.output
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_the_soak_finds_the_first_differing_position_between_two_states(tmp_path):
    """The soak's diagnosis, on two states that do differ at equal length: a last turn that read
    "colour red" from z9 reads "colour blue" (a span standing instead of z9) once z9 is forgotten."""
    from unsee.impl.experiments.soak import first_difference

    ep = tmp_path / "e.jsonl"
    last = {"kind": "user", "reply": 2, "parts": [{"source": "u5", "text": "colour blue", "instead_of": "z9"},
                                                  {"source": "z9", "text": "colour red"}]}
    ep.write_text(EPISODE.read_text() + json.dumps(last) + "\n")
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    assert invoke("run", ep, "--db", a, "--model", "tiny-llama").exit_code == 0
    copy_store(a, b)
    assert invoke("forget", "--db", b, "--source", "z9").exit_code == 0
    diff = first_difference(a, b)
    assert "transcript" in diff["layers"] and diff["kv_layers_differ"]
    assert diff["first"]["tensor"] in ("K", "V") and diff["first"]["token"] >= 0
    same = first_difference(a, a)
    assert same == {"layers": [], "kv_layers_differ": [], "first": None}


def test_the_soak_runs_forget_and_check_in_new_processes(tmp_path):
    from unsee.impl.experiments.soak import soak

    doc = soak("tiny-llama", turns=13, iterations=1, load=0, out=tmp_path / "soak")
    assert doc["failures"] == 0 and doc["rows"][0]["exact"] and doc["rows"][0]["transitions"] == 12
    assert doc["environment"]["identity"]["threads"] == 1 and not (tmp_path / "soak" / "iteration-000").exists()


def test_a_hidden_part_of_the_target_before_tau_leaves_the_stored_log(tmp_path):
    """A part of z that stands instead of another source (shown only in a world without that
    source) is never read by F, so it sits before τ; the twin's log never held it, so after the
    forget the store's log must not either: its bytes are gone from the file."""
    from unsee.impl.store.episode import write_episode
    from unsee.model import Observation, Part

    obs = [Observation("system", (Part("sys", "you are an agent"),)),
           Observation("tool", (Part("y", "file size 12 bytes"), Part("z", "quokka lagoon 4471", instead_of="y")),
                       reply=2),
           Observation("user", (Part("u3", "go on"),), reply=2),
           Observation("memory", (Part("z", "the code is quokka lagoon 4471"),)),
           Observation("user", (Part("u5", "thanks"),), reply=2)]
    ep = tmp_path / "e.jsonl"
    write_episode(ep, obs)
    db = tmp_path / "s.db"
    assert invoke("run", ep, "--db", db, "--model", "reference").exit_code == 0
    assert b"quokka lagoon 4471" in db.read_bytes()
    res = invoke("forget", "--db", db, "--source", "z", "--json", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "r.json").read_text())["tau"] == 4
    assert b"quokka lagoon" not in db.read_bytes()
    assert invoke("check", "--db", db, "--fast").exit_code == 0
    check = invoke("check", "--db", db)
    assert check.exit_code == 0 and "exact=True" in check.output, check.output
