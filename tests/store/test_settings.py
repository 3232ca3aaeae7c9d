"""Execution settings are part of a stored state: `unsee run` records the kernel, dtype and
threads it ran under (choosing the kernel by measurement unless told), every later process
runs under them, and opening the store under other settings is refused."""

import json

import pytest
from typer.testing import CliRunner

from unsee.impl.cli import app
from unsee.impl.store.errors import StoreError
from unsee.impl.store.session import open_runtime
from unsee.impl.store.sqlite import Store

from tests.store.test_cli_store import EPISODE

pytestmark = pytest.mark.tiny


def _identity(db) -> dict:
    store = Store(db)
    try:
        return json.loads(store.meta("identity"))
    finally:
        store.close()


def test_a_store_run_under_sdpa_is_forgotten_and_checked_under_sdpa(tmp_path):
    db = tmp_path / "s.db"
    runner = CliRunner()
    res = runner.invoke(app, ["run", str(EPISODE), "--db", str(db), "--model", "tiny-llama", "--attn", "sdpa"])
    assert res.exit_code == 0, res.output
    assert "sdpa attention" in res.output and "attention: auto" not in res.output
    assert _identity(db)["attn"] == "sdpa"
    res = runner.invoke(app, ["forget", "--db", str(db), "--source", "addr"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["check", "--db", str(db)])
    assert res.exit_code == 0 and "exact=True" in res.output, res.output
    assert _identity(db)["attn"] == "sdpa"  # the forget and the check ran under it, and kept it

    store = Store(db)
    try:
        with pytest.raises(StoreError, match=r"was run with attn='sdpa'; this process would run attn='eager'"):
            open_runtime(store, attn="eager")
        with pytest.raises(StoreError, match=r"threads=1.*threads=2"):
            open_runtime(store, threads=2)
    finally:
        store.close()


def test_run_chooses_the_kernel_by_measurement_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("UNSEE_CACHE_DIR", str(tmp_path / "cache"))  # measured here, not read from the user's cache
    db = tmp_path / "s.db"
    res = CliRunner().invoke(app, ["run", str(EPISODE), "--db", str(db), "--model", "tiny-llama"])
    assert res.exit_code == 0, res.output
    chosen = _identity(db)["attn"]
    text = " ".join(res.output.split())
    assert chosen in ("eager", "sdpa") and f"{chosen} attention" in text
    assert "attention: auto: the faster kernel here on a 768-token block and 4 8-token forwards after it (eager" in text
    assert "measured now" in text and list((tmp_path / "cache" / "selftest").glob("attn-*.json"))
    res = CliRunner().invoke(app, ["run", str(EPISODE), "--db", str(tmp_path / "t.db"), "--model", "tiny-llama"])
    assert "measured earlier on this machine" in " ".join(res.output.split())  # once per model and machine
    assert _identity(tmp_path / "t.db")["attn"] == chosen


def test_run_refuses_an_existing_store_before_it_measures_anything(tmp_path, monkeypatch):
    import unsee.impl.engine.settings as settings

    db = tmp_path / "s.db"
    db.write_bytes(b"not yours")
    monkeypatch.setattr(settings, "choose_attn", lambda *a, **k: pytest.fail("measured before the path was checked"))
    res = CliRunner().invoke(app, ["run", str(EPISODE), "--db", str(db), "--model", "tiny-llama"])
    assert res.exit_code == 2 and "already exists" in res.output and db.read_bytes() == b"not yours"


def test_run_refuses_settings_that_do_not_exist(tmp_path):
    runner = CliRunner()
    for bad in (["--attn", "flash"], ["--dtype", "int8"], ["--threads", "0"]):
        res = runner.invoke(app, ["run", str(EPISODE), "--db", str(tmp_path / "x.db"), *bad])
        assert res.exit_code == 2, (bad, res.output)
    assert not (tmp_path / "x.db").exists()
