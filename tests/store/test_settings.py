"""Execution settings are part of a stored state: `unsee run` records the kernel, dtype and
threads it ran under (choosing them by measurement unless told), every later process runs
under them, and opening the store under other settings is refused."""

import json

import pytest
from typer.testing import CliRunner

from unsee.impl.cli import app
from unsee.impl.store.errors import StoreError
from unsee.impl.store.agent import open_runtime
from unsee.impl.store.sqlite import Store

from tests.store.test_cli_store import EPISODE

pytestmark = pytest.mark.tiny
AUTO = ["--attn", "auto", "--dtype", "auto", "--threads", "auto"]  # what `unsee run` does untold (the tests pin them)


def _identity(db) -> dict:
    store = Store(db)
    try:
        return json.loads(store.meta("identity"))
    finally:
        store.close()


def test_a_store_run_under_sdpa_is_forgotten_and_checked_under_sdpa(tmp_path):
    db = tmp_path / "s.db"
    runner = CliRunner()
    res = runner.invoke(app, ["run", str(EPISODE), "--db", str(db), "--model", "tiny-llama", "--attn", "sdpa",
                              "--dtype", "float32", "--threads", "1"])
    assert res.exit_code == 0, res.output
    assert "sdpa attention" in res.output and "chosen:" not in res.output  # all given: nothing measured
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


def test_run_chooses_kernel_dtype_and_threads_by_measurement_and_says_so(tmp_path, monkeypatch):
    from unsee.impl.engine.settings import cores

    monkeypatch.setenv("UNSEE_CACHE_DIR", str(tmp_path / "cache"))  # measured here, not read from the user's cache
    db = tmp_path / "s.db"
    res = CliRunner().invoke(app, ["run", str(EPISODE), "--db", str(db), "--model", "tiny-llama", *AUTO])
    assert res.exit_code == 0, res.output
    chosen = {k: _identity(db)[k] for k in ("attn", "dtype", "threads")}
    text = " ".join(res.output.split())
    assert chosen["attn"] in ("eager", "sdpa") and chosen["dtype"] in ("float32", "bfloat16")
    assert chosen["threads"] in {1, cores()}
    assert f"settings: {chosen['dtype']}, {chosen['attn']} attention, {chosen['threads']} thread(s)" in text
    assert "chosen: auto: the fastest here on a 768-token block and 4 8-token forwards after it (" in text
    for attn in ("eager", "sdpa"):  # every combination was measured, and the output gives each time
        for dtype in ("float32", "bfloat16"):
            for threads in sorted({1, cores()}):
                assert f"{attn}, {dtype}, {threads} thread(s) " in text, (attn, dtype, threads)
    assert "measured now" in text and list((tmp_path / "cache" / "selftest").glob("settings-*.json"))
    res = CliRunner().invoke(app, ["run", str(EPISODE), "--db", str(tmp_path / "t.db"), "--model", "tiny-llama", *AUTO])
    assert "measured earlier on this machine" in " ".join(res.output.split())  # once per model and machine
    assert {k: _identity(tmp_path / "t.db")[k] for k in chosen} == chosen


def test_the_fastest_candidate_whose_self_test_holds_is_chosen(tmp_path, monkeypatch):
    """`choose` takes the fastest setting among those whose premise self-test holds, and only
    those: a faster setting whose self-test fails is refused and named."""
    import unsee.impl.engine.settings as settings

    fake = {"eager, float32, 1 thread(s)": 3.0, "sdpa, float32, 1 thread(s)": 2.0,
            "eager, bfloat16, 1 thread(s)": 1.5, "sdpa, bfloat16, 1 thread(s)": 1.0}

    def pick(*refuse):  # measured afresh (a new cache), with these self-tests failing
        monkeypatch.setenv("UNSEE_CACHE_DIR", str(tmp_path / str(len(refuse))))
        monkeypatch.setattr(settings, "_measure", lambda engines: ({k: fake[k] for k in engines if k not in refuse},
                                                                   [k for k in engines if k in refuse]))
        return settings.choose("tiny-llama", threads=1)

    assert pick()[0] == {"attn": "sdpa", "dtype": "bfloat16", "threads": 1}
    best, why = pick("sdpa, bfloat16, 1 thread(s)")
    assert best == {"attn": "eager", "dtype": "bfloat16", "threads": 1}
    assert "sdpa, bfloat16, 1 thread(s) refused: its self-test fails" in why
    best, why = pick(*fake)
    assert best == {"attn": "eager", "dtype": "float32", "threads": 1} and "fails for every candidate" in why
    assert settings.choose("tiny-llama", attn="sdpa", dtype="float32", threads=2) == (
        {"attn": "sdpa", "dtype": "float32", "threads": 2}, "as given")


def test_choosing_restores_the_thread_count_and_holds_at_most_two_loads(tmp_path, monkeypatch):
    """The engines `choose` measures pin the process's thread count; it is put back, also when a
    measurement fails. One (kernel, dtype) load is measured at a time, beside the best so far."""
    import torch

    import unsee.impl.engine.settings as settings
    from unsee.impl.engine import models

    monkeypatch.setenv("UNSEE_CACHE_DIR", str(tmp_path))
    threads, held = torch.get_num_threads(), []

    def measure(engines):
        held.append(sum(1 for k in models._CACHE if k[0] == "tiny-llama"))
        return {k: 1.0 + len(held) for k in engines}, []  # the first load measured stays the fastest

    monkeypatch.setattr(settings, "_measure", measure)
    for k in [k for k in models._CACHE if k[0] == "tiny-llama"]:
        models._CACHE.pop(k)
    best, _ = settings.choose("tiny-llama", threads="2")
    assert torch.get_num_threads() == threads and max(held) <= 2 and len(held) == 4
    assert best == {"attn": "eager", "dtype": "float32", "threads": 2}
    assert [k for k in models._CACHE if k[0] == "tiny-llama"] == [("tiny-llama", "float32", "cpu", "eager")]

    def broken(engines):
        raise RuntimeError("a measurement that fails")

    monkeypatch.setattr(settings, "_measure", broken)
    monkeypatch.setenv("UNSEE_CACHE_DIR", str(tmp_path / "again"))
    with pytest.raises(RuntimeError):
        settings.choose("tiny-llama", threads="2")
    assert torch.get_num_threads() == threads


def test_the_python_api_runs_the_reference_model_with_auto_settings(tmp_path):
    from unsee.impl.store.agent import Agent

    with Agent.create(tmp_path / "r.db", "reference", attn="auto", dtype="auto", threads="auto") as agent:
        assert agent.settings_note is None and agent.session.T == 0


def test_run_refuses_an_existing_store_before_it_measures_anything(tmp_path, monkeypatch):
    import unsee.impl.engine.settings as settings

    db = tmp_path / "s.db"
    db.write_bytes(b"not yours")
    monkeypatch.setattr(settings, "choose", lambda *a, **k: pytest.fail("measured before the path was checked"))
    res = CliRunner().invoke(app, ["run", str(EPISODE), "--db", str(db), "--model", "tiny-llama", *AUTO])
    assert res.exit_code == 2 and "already exists" in res.output and db.read_bytes() == b"not yours"


def test_run_refuses_settings_that_do_not_exist(tmp_path):
    runner = CliRunner()
    for bad in (["--attn", "flash"], ["--dtype", "int8"], ["--threads", "0"], ["--threads", "many"]):
        res = runner.invoke(app, ["run", str(EPISODE), "--db", str(tmp_path / "x.db"), *bad])
        assert res.exit_code == 2, (bad, res.output)
    assert not (tmp_path / "x.db").exists()
