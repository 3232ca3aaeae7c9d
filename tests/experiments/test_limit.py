"""The limit of a forget's own forwards (`unsee bench forget`): the replay runs exactly the
forwards the forget ran, counted against the engine, and leaves the runtime as it was."""

import json

import pytest
import torch
from typer.testing import CliRunner

from unsee.impl.cli import app
from unsee.impl.engine.kv_runtime import KVRuntime
from unsee.impl.experiments.bench_sessions import agent_session
from unsee.impl.experiments.limit import forward_limit
from unsee.model import Config

pytestmark = pytest.mark.tiny


@pytest.mark.parametrize("method", ["B7", "B5", "B5'"])
def test_the_limit_replays_exactly_the_forgets_forwards(method):
    rt = KVRuntime("tiny-llama", Config(summary_tokens=4))
    for o in agent_session(14, None, 0.0, 4)[0]:
        rt.step(o)
    e = rt.engine
    f0, t0 = e.forwards, e.tokens_prefilled + e.tokens_decoded
    receipt = rt.forget(["z"], method=method)
    forwards, tokens = e.forwards - f0, e.tokens_prefilled + e.tokens_decoded - t0
    digests = dict(rt.digest())
    limit = forward_limit(rt)
    assert (limit["forwards"], limit["tokens"]) == (forwards, tokens)
    assert limit["seconds"] > 0
    assert dict(rt.digest()) == digests  # the replay ran on a copy of the engine
    if method == "B5'":
        assert receipt.work.tokens_reused > 0 and receipt.work.tokens_computed == tokens - 1  # the fresh cache's BOS


def test_bench_forget_prints_the_three_methods_against_their_own_forwards(tmp_path):
    out = tmp_path / "f.json"
    threads = torch.get_num_threads()
    try:
        res = CliRunner().invoke(app, ["bench", "forget", "--model", "tiny-llama", "--T", "13", "--repeats", "1",
                                       "--threads", "2", "--dtype", "bfloat16", "--json", str(out),
                                       "--markdown", str(tmp_path / "f.md")])
    finally:
        torch.set_num_threads(threads)  # the engine pins the process's thread count
    assert res.exit_code == 0, res.output
    assert "bit-exact: every method left the same state digests" in res.output and "bfloat16, 2 thread(s)" in res.output
    doc = json.loads(out.read_text())["runs"][0]
    assert doc["threads"] == 2 and doc["dtype"] == "bfloat16"  # read back from the store every forget process opened
    assert doc["machine"]["cores"] >= 1  # what the seconds ran on, in the table's notes too
    assert f"Ran on {doc['machine']['cpu']}, {doc['machine']['cores']} cores" in (tmp_path / "f.md").read_text()
    ms = doc["methods"]
    assert doc["bit_exact"] and set(ms) == {"B5", "B5'", "B7"}
    assert ms["B7"]["transitions"] == 13 - ms["B7"]["tau"] + 1 == 12 and ms["B5"]["transitions"] == 13
    assert ms["B7"]["tokens_computed"] <= ms["B5'"]["tokens_computed"] <= ms["B5"]["tokens_computed"]
    assert ms["B7"]["tokens_restored"] > 0 and ms["B5'"]["tokens_reused"] > 0


def test_bench_forget_refuses_a_session_too_short_for_the_target():
    res = CliRunner().invoke(app, ["bench", "forget", "--T", "5"])
    assert res.exit_code == 2 and "--T must be >= 13" in res.output
