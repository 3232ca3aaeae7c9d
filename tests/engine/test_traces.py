"""Trace validation: the event log a real engine records while it forgets is one the
specification allows (`unsee.specs.traces`), on varied sessions of the tiny families (live,
and in a fresh store open with K/V pages or with re-materialization), and two mutated engines
that a forget runs through without an error are rejected, each by the rule it breaks."""

import random
from dataclasses import replace

import pytest

from tests.kv_helpers import EPISODE, FAMILIES
from unsee.impl.engine.lm import TorchLM
from unsee.impl.engine.kv_runtime import KVRuntime
from unsee.impl.store.agent import forget_stored
from unsee.impl.store.sqlite import Store
from unsee.model import Config, Observation, Part, UnseeError
from unsee.specs.traces import (
    Append, Begin, Commit, Crop, Expectation, Fire, Forward, RebuildBegin, RebuildEnd, Reset, StepEnd, check,
)

WORDS = "the trip to coast plan send book lookup alice street note park river blue seven map gift".split()


def random_episode(rng: random.Random, T: int, tau: int, compact_at: int | None = None) -> tuple[Observation, ...]:
    """A session of T observations; the target "z" enters at transition τ (sometimes beside
    another part, sometimes with a span that stands in its place without it)."""
    obs = [Observation("system", (Part("sys", "you are an agent"),))]
    for t in range(2, T + 1):
        kind = rng.choice(("user", "memory", "tool"))
        text = " ".join(rng.choices(WORDS, k=rng.randint(2, 5)))
        parts = (Part(f"s{t}", text),)
        if t == tau:
            z = Part("z", "alice lives at " + " ".join(rng.choices(WORDS, k=3)))
            extra = rng.choice(("alone", "beside", "instead"))
            parts = ((z,) if extra == "alone" else (z,) + parts if extra == "beside"
                     else (z, Part(f"s{t}", "no address given", instead_of="z")))
        tool = rng.choice((None, None, "send", "lookup"))
        obs.append(Observation(kind, parts, reply=rng.choice((0, 2, 3)), tool=tool, compact=t == compact_at))
    return tuple(obs)


def run(model, episode, policy="every", config=Config(), kv_pages=True):
    rt = KVRuntime(model, config, policy, kv_pages=kv_pages)
    for o in episode:
        rt.step(o)
    return rt


def restore_kind(events) -> str:
    """How the log's restore brought the checkpoint back: the first cache-cutting event."""
    first = next(e for e in events[1:] if isinstance(e, (Crop, Reset, RebuildBegin)))
    return {Crop: "crop", Reset: "reset", RebuildBegin: "rebuild"}[type(first)]


def rules(violations) -> set[str]:
    return {v.rule for v in violations}


# --- the checker on logs written by hand --------------------------------------------------

WANT = Expectation(method="B7", tau=2, T=3, checkpoint=1, latest=1, forced=False, offset=5,
                   compacts=frozenset({3}), accounted=frozenset({"call-t2"}), transitions=2,
                   tokens_restored=0, tokens_rematerialized=0, tokens_decoded=2)
GOOD = (
    Begin(base=1, length=12),
    Crop(6),  # the restore: R_1's 5 context tokens after the BOS
    Forward("prefill", 6, 3), Forward("prefill", 9, 1), Forward("decode", 10, 1), Crop(10),
    Forward("prefill", 10, 1),
    Commit(2, "call-t2", "send"), StepEnd(2, 10),
    Forward("prefill", 11, 2), Forward("decode", 13, 1), Crop(13), Forward("prefill", 13, 1),
    RebuildBegin(), Crop(3), Forward("prefill", 3, 1), RebuildEnd(3),
    StepEnd(3, 3),
)


@pytest.mark.tiny
def test_a_log_the_spec_allows_is_accepted():
    assert check(GOOD, WANT) == []


@pytest.mark.tiny
@pytest.mark.parametrize("name, log, want, rule", [
    ("no Begin", GOOD[1:], WANT, "log"),
    ("a decode before the restore", GOOD[:1] + (Forward("decode", 12, 1), Crop(6)) + GOOD[2:],
     replace(WANT, tokens_decoded=3), "restore-first"),
    ("the restore one token short", GOOD[:1] + (Crop(5), Forward("prefill", 5, 4)) + GOOD[3:], WANT,
     "restore-offset"),
    ("a second crop into the restored context", GOOD[:3] + (Crop(4), Forward("prefill", 4, 5)) + GOOD[3:],
     WANT, "one-restore"),
    ("no restore at all", (Begin(1, 6), Forward("prefill", 6, 4), StepEnd(2, 9)), replace(WANT, T=2), "one-restore"),
    ("a rebuild in a transition that does not compact", GOOD[:7] + (RebuildBegin(), Crop(3), RebuildEnd(2))
     + (Forward("prefill", 3, 7),) + GOOD[7:], WANT, "one-restore"),
    ("transition 2 twice", GOOD[:9] + (StepEnd(2, 10),) + GOOD[9:], WANT, "transitions"),
    ("the last transition missing", GOOD[:9], WANT, "transitions"),
    ("a forward that skips a position", GOOD[:3] + (Forward("prefill", 10, 1),) + GOOD[4:], WANT, "contiguous"),
    ("a transition that ends on a longer cache", GOOD[:8] + (StepEnd(2, 9),) + GOOD[9:], WANT, "context"),
    ("a compaction without its rebuild", GOOD[:13] + (Crop(3), StepEnd(3, 2)), WANT, "compaction"),
    ("a call fired", GOOD + (Fire("call-t2", "send"),), WANT, "no-fire"),
    ("a commit the receipt does not report", GOOD, replace(WANT, accounted=frozenset()), "commits-accounted"),
    ("rows the receipt does not count", GOOD, replace(WANT, tokens_restored=5), "restore-accounted"),
    ("decodes the receipt does not count", GOOD, replace(WANT, tokens_decoded=1), "decode-accounted"),
    ("a checkpoint older than the latest before τ", GOOD, replace(WANT, latest=2), "checkpoint"),
])
def test_each_rule_rejects_the_log_that_breaks_it(name, log, want, rule):
    found = check(log, want)
    assert rule in rules(found), (name, [str(v) for v in found])
    assert all(str(v).startswith(f"[{v.rule}] event ") for v in found)


# --- real runs: the checker accepts them --------------------------------------------------

@pytest.mark.tiny
@pytest.mark.parametrize("model", FAMILIES)
def test_every_forget_of_varied_sessions_follows_the_spec(model):
    """Seeded random sessions, forgotten live: restores by crop and by rebuild, a compaction
    in the replayed suffix, greedy and sampled replies, a checkpoint at τ−1 and one older."""
    rng = random.Random(f"traces-{model}")
    kinds, compacted, older = set(), 0, 0
    cases = [(6, 3, 5, "every", Config()),  # compaction in the suffix: the restore rebuilds
             (7, 5, 2, "every", Config(sampling=True, seed=3)),  # compaction before: the restore crops
             (5, 4, None, "start", Config())]  # only R_0 is checkpointed: c < τ−1
    for T, tau, compact_at, policy, cfg in cases:
        rt = run(model, random_episode(rng, T, tau, compact_at), policy, cfg)
        rt.forget(["z"])
        trace = rt.last_trace
        assert trace.violations() == [], [str(v) for v in trace.violations()]
        want = trace.want
        assert want.transitions == want.T - want.checkpoint == len([e for e in trace.events if isinstance(e, StepEnd)])
        kinds.add(restore_kind(trace.events))
        compacted += bool(want.compacts)
        older += want.checkpoint < want.tau - 1
    assert kinds == {"crop", "rebuild"} and compacted >= 1 and older >= 1


@pytest.mark.tiny
@pytest.mark.parametrize("model", FAMILIES)
def test_full_reset_and_forced_checkpoint_follow_the_spec(model):
    rt = run(model, EPISODE)
    b5, b5p, forced = rt.branch(), rt.branch(), rt.branch()
    b5.forget(["z"], method="B5")
    assert b5.last_trace.violations() == [] and restore_kind(b5.last_trace.events) == "reset"
    b5p.forget(["z"], method="B5'")  # the resident cache as a prefix cache: its rows appended, not computed
    assert b5p.last_trace.violations() == [] and any(isinstance(e, Append) for e in b5p.last_trace.events)
    forced.forget(["z"], checkpoint=1)
    assert forced.last_trace.violations() == [] and forced.last_trace.want.checkpoint == 1


@pytest.mark.tiny
@pytest.mark.parametrize("pages", [True, False], ids=["pages", "rematerialize"])
@pytest.mark.parametrize("model", FAMILIES)
def test_a_stored_session_forgotten_in_a_fresh_open_follows_the_spec(tmp_path, model, pages):
    rt = run(model, EPISODE, kv_pages=pages)
    db = tmp_path / "s.db"
    st = Store(db, create=True)
    st.save(rt.session, model, rt.model, dict(rt.digest()))
    st.close()
    st = Store(db)
    try:
        fresh, doc = forget_stored(st, ["z"])
    finally:
        st.close()
    trace = fresh.last_trace
    assert trace.violations() == [], [str(v) for v in trace.violations()]
    assert restore_kind(trace.events) == "rebuild"
    if pages:
        assert doc["tokens_rematerialized"] == 0 and doc["tokens_restored"] > 0
    else:
        assert doc["tokens_rematerialized"] > 0 and doc["tokens_restored"] == 0
    assert trace.want.compacts  # the compaction at t=6 is in the replayed suffix


@pytest.mark.tiny
def test_a_stored_session_reopened_after_a_forget_follows_the_spec(tmp_path):
    """A second forget, in another fresh open of the store the first one rewrote."""
    rt = run("tiny-llama", EPISODE[:4] + (Observation("user", (Part("y", "my cat is rex"),), reply=2),)
             + EPISODE[4:])
    db = tmp_path / "s.db"
    st = Store(db, create=True)
    st.save(rt.session, "tiny-llama", rt.model, dict(rt.digest()))
    st.close()
    for target in ("y", "z"):
        st = Store(db)
        try:
            fresh, _ = forget_stored(st, [target])
        finally:
            st.close()
        assert fresh.last_trace.violations() == [], (target, [str(v) for v in fresh.last_trace.violations()])


@pytest.mark.tiny
def test_unsee_forget_reports_the_trace_check(tmp_path):
    """`unsee forget --json` on a store run with `--kv-pages none`: the receipt carries the check."""
    import json

    from typer.testing import CliRunner

    from unsee.impl.cli import app
    from unsee.impl.store.episode import write_episode

    ep, db, receipt = tmp_path / "e.jsonl", tmp_path / "s.db", tmp_path / "r.json"
    write_episode(ep, EPISODE)
    runner = CliRunner()
    r = runner.invoke(app, ["run", str(ep), "--db", str(db), "--model", "tiny-mistral", "--kv-pages", "none"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["forget", "--db", str(db), "--source", "z", "--json", str(receipt)])
    assert r.exit_code == 0, r.output
    doc = json.loads(receipt.read_text())
    assert doc["tokens_rematerialized"] > 0 and doc["trace"]["events"] > doc["transitions"]
    assert doc["trace"]["violations"] == [] and "allowed by the spec" in r.output


# --- mutated engines: a forget runs through them, the trace rejects it ------------------

def crops_one_short(lm: TorchLM, reports_length: bool = False) -> None:
    """Turn `lm` into an engine whose restore crops one token short. Unless it reports its cache's
    true length (`kv_length`), restore cannot compare the cache with the checkpoint's context, so
    the forget runs through and only the trace can tell; with it, restore refuses."""

    class Mutant(type(lm)):
        if not reports_length:
            def kv_length(self, kv):  # the length it meant to keep, not the one it kept
                return super().kv_length(kv) + 1

        def crop(self, kv, n):
            self._live(kv)
            self.engine.crop(len(self.bos) + n - 1)  # one position too few
            self.ctx = self.ctx[:n - 1]
            self.chain = [(b, k) for b, k in self.chain if b.end <= n - 1]
            return self._ref()

    lm.__class__ = Mutant


def decodes_before_restoring(lm: TorchLM) -> None:
    """Turn `lm` into an engine that decodes a token on the contaminated cache, then restores."""

    class Mutant(type(lm)):
        def crop(self, kv, n):
            self._live(kv)
            self.engine.decode(1)  # a forward before the restore (its row is cropped away by it)
            self.engine.crop(len(self.bos) + n)
            self.ctx = self.ctx[:n]
            self.chain = [(b, k) for b, k in self.chain if b.end <= n]
            return self._ref()

    lm.__class__ = Mutant


MUTANTS = {"crops-one-short": (crops_one_short, "restore-offset"),
           "decodes-before-restoring": (decodes_before_restoring, "restore-first")}


@pytest.fixture(scope="module")
def cropped_session():
    """A session whose forget restores by cropping the resident cache (its compaction comes
    before τ), with a consequential call committed in the replayed suffix."""
    summarize = Observation("user", (Part("u0", "summarize so far"),), reply=2, compact=True)
    episode = EPISODE[:2] + (summarize,) + EPISODE[2:5] + EPISODE[6:]
    return run("tiny-llama", episode)


@pytest.mark.tiny
@pytest.mark.parametrize("mutant", MUTANTS)
def test_a_mutated_engine_is_rejected_by_the_rule_it_breaks(cropped_session, mutant):
    mutate, rule = MUTANTS[mutant]
    good, bad = cropped_session.branch(), cropped_session.branch()
    r_good = good.forget(["z"])
    assert good.last_trace.violations() == [] and restore_kind(good.last_trace.events) == "crop"
    mutate(bad.model)
    r_bad = bad.forget(["z"])  # runs through: no exception
    found = bad.last_trace.violations()
    assert rule in rules(found), [str(v) for v in found]
    assert r_bad.transitions == r_good.transitions
    if mutant == "decodes-before-restoring":
        # it leaves the same bits and the same receipt: only the trace tells it apart
        assert bad.digest() == good.digest()
        assert (r_bad.work.tokens_decoded, r_bad.work.tokens_prefilled) == (r_good.work.tokens_decoded, r_good.work.tokens_prefilled)
    else:
        assert bad.digest()["kv"] != good.digest()["kv"]


@pytest.mark.tiny
def test_agent_forget_checks_the_trace_before_it_persists(tmp_path):
    """`Agent.forget` (and `unsee forget`, through `forget_stored`) checks the engine's trace
    against the spec before it saves: a mutated engine's forget raises TraceViolation naming the
    rule and the store keeps its session; the next forget reopens the store and succeeds."""
    from unsee.impl.store.agent import Agent, TraceViolation

    summarize = Observation("user", (Part("u0", "summarize so far"),), reply=2, compact=True)
    episode = EPISODE[:2] + (summarize,) + EPISODE[2:5] + EPISODE[6:]
    with Agent.create(tmp_path / "a.db", model="tiny-llama", observations=episode) as agent:
        root = agent.store.root()
        decodes_before_restoring(agent.runtime.model)
        with pytest.raises(TraceViolation, match="restore-first.*nothing was written"):
            agent.forget(["z"])
        assert agent.store.root() == root and agent.store.receipts() == [] and not agent.store.is_forgotten("z")
        doc = agent.forget(["z"])  # a fresh runtime from the store: its engine follows the spec
        assert doc["trace"]["violations"] == [] and agent.store.is_forgotten("z") and agent.check()["exact"]


@pytest.mark.tiny
def test_restore_refuses_a_short_crop_where_the_engine_reports_its_length(cropped_session):
    bad = cropped_session.branch()
    crops_one_short(bad.model, reports_length=True)
    with pytest.raises(UnseeError, match="restored a cache of"):
        bad.forget(["z"])


# --- the slow tier: SmolLM2 ---------------------------------------------------------------

@pytest.mark.slow
def test_smollm2_forgets_follow_the_spec_and_the_mutants_do_not():
    rt = run("smollm2", EPISODE[:5] + (EPISODE[6],))  # short turns; no compaction: the restore crops
    good, bad = rt.branch(), rt.branch()
    good.forget(["z"])
    assert good.last_trace.violations() == [], [str(v) for v in good.last_trace.violations()]
    decodes_before_restoring(bad.model)
    bad.forget(["z"])
    assert "restore-first" in rules(bad.last_trace.violations())
    compacting = run("smollm2", EPISODE)  # the compaction at t=6 is in the suffix: the restore rebuilds
    compacting.forget(["z"])
    assert compacting.last_trace.violations() == [] and restore_kind(compacting.last_trace.events) == "rebuild"
