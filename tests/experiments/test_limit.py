"""The limit of a forget's own forwards (`unsee bench forget`): the replay runs exactly the
forwards the forget ran, counted against the engine, and leaves the runtime as it was."""

import json

import pytest
import torch
from typer.testing import CliRunner

from unsee.impl.cli import app
from unsee.impl.engine.runtime import KVRuntime
from unsee.impl.experiments.bench_sessions import agent_session
from unsee.impl.experiments.limit import forward_limit, merged_observations
from unsee.model import Config
from unsee.specs.traces import Append, Crop, Forward, StepEnd

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
        assert receipt.tokens_reused > 0 and receipt.tokens_computed == tokens - 1  # the fresh cache's BOS


def P(start, n, logits=True):
    return Forward("prefill", start, n, logits)


def D(start, n):
    return Forward("decode", start, n, True)


@pytest.mark.parametrize("recorded, merged", [
    # a draft that holds: the observation and the turn become one forward
    ([Append("pages", 0, 10), P(10, 4, False), P(14, 2, False), P(16, 6), StepEnd(1, 22)],
     [Append("pages", 0, 10), P(10, 12), StepEnd(1, 22)]),
    # no draft: the header alone drafts (with the observation now), then the canonical prefill
    # starts again from the observation's first position
    ([P(0, 10, False), D(10, 3), D(13, 1), D(14, 1), Crop(10), P(10, 6), StepEnd(1, 16)],
     [D(0, 13), D(13, 1), D(14, 1), Crop(0), P(0, 16), StepEnd(1, 16)]),
    # a rejected draft: the crop inside the reply stays, the crop to the header goes to the blocks
    ([P(0, 10, False), P(10, 6), Crop(12), D(12, 1), Crop(10), P(10, 6), StepEnd(1, 16)],
     [P(0, 16), Crop(12), D(12, 1), Crop(0), P(0, 16), StepEnd(1, 16)]),
    # a transition with no model turn keeps its blocks: R_t's K/V are its own
    ([P(0, 10, False), StepEnd(1, 10), P(10, 3, False), P(13, 5), StepEnd(2, 18)],
     [P(0, 10, False), StepEnd(1, 10), P(10, 8), StepEnd(2, 18)]),
])
def test_the_merged_schedule_joins_each_observation_to_its_model_turn(recorded, merged):
    assert merged_observations(recorded) == merged


@pytest.mark.parametrize("method", ["B7", "B5"])
def test_the_merged_schedule_of_a_real_forget_replays_and_saves_forwards(method):
    rt = KVRuntime("tiny-llama", Config(summary_tokens=4))
    for o in agent_session(14, None, 0.0, 4)[0]:
        rt.step(o)
    rt.forget(["z"], method=method)
    recorded = forward_limit(rt)
    merged = forward_limit(rt, merged_observations(rt.last_trace.events))  # contiguous, or it raises
    assert merged["forwards"] < recorded["forwards"]
    assert merged["tokens"] >= recorded["tokens"]  # a decoded turn computes its observation twice


def test_bench_forget_prints_the_three_methods_against_their_own_forwards(tmp_path):
    out = tmp_path / "f.json"
    threads = torch.get_num_threads()
    try:
        res = CliRunner().invoke(app, ["bench", "forget", "--model", "tiny-llama", "--T", "13", "--repeats", "1",
                                       "--threads", "2", "--dtype", "bfloat16", "--json", str(out)])
    finally:
        torch.set_num_threads(threads)  # the engine pins the process's thread count
    assert res.exit_code == 0, res.output
    assert "bit-exact: every method left the same state digests" in res.output and "bfloat16, 2 thread(s)" in res.output
    doc = json.loads(out.read_text())["runs"][0]
    assert doc["threads"] == 2 and doc["dtype"] == "bfloat16"  # read back from the store every forget process opened
    ms = doc["methods"]
    assert doc["bit_exact"] and set(ms) == {"B5", "B5'", "B7"}
    assert ms["B7"]["transitions"] == 13 - ms["B7"]["tau"] + 1 == 12 and ms["B5"]["transitions"] == 13
    assert ms["B7"]["tokens_computed"] <= ms["B5'"]["tokens_computed"] <= ms["B5"]["tokens_computed"]
    assert ms["B7"]["tokens_restored"] > 0 and ms["B5'"]["tokens_reused"] > 0


def test_bench_forget_refuses_a_session_too_short_for_the_target():
    res = CliRunner().invoke(app, ["bench", "forget", "--T", "5"])
    assert res.exit_code == 2 and "--T must be >= 13" in res.output
