"""What a runtime persists, judged by the kit (`unsee.specs.erasure`, `unsee.specs.persistence`): the
example runtime that keeps its state in its own SQLite file (docs/examples/sqlite_runtime.py)
passes, and each check fails on the runtime that breaks it: a forgotten text left in a side file,
a prefix log kept verbatim, a table left out of the seal. Compensation at its boundary (a call
committed at τ = c+1) and the generators that reach it are here too."""

import hashlib
import json
from pathlib import Path

import pytest

from unsee.model import Observation, Part
from unsee.model.state import LedgerEntry
from unsee.specs import erasure as E
from unsee.specs import oracle
from unsee.specs import persistence as P
from unsee.specs import statements as S
from unsee.specs.protocol import ProtocolViolation, SpecViolation

ROOT = Path(__file__).resolve().parents[2]
SECRET = "gamma delta secret words"
# o_1 holds a hidden part of z1 (standing instead of s1's): F never reads it, but the log before τ
# holds it, so a forget spliced at c = 1 must rewrite o_1 too; z1 enters visibly at τ = 2
STREAM = (Observation("user", (Part("s1", "alpha beta"), Part("z1", SECRET, instead_of="s1")), reply=1),
          Observation("user", (Part("z1", SECRET),), reply=2, tool="send"),
          Observation("user", (Part("s3", "epsilon zeta"),), reply=1))


@pytest.fixture
def example(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "docs" / "examples"))
    import sqlite_runtime

    return sqlite_runtime


def forget_and_judge(factory) -> S.Observed:
    """The session, the forget of z1 and the twin; every forget statement (the erasure one included)."""
    ob = S.observe(factory, STREAM, ["z1"], policy="every")
    S.check_all(ob)
    return ob


def test_the_sqlite_example_persists_nothing_forgotten(example):
    ob = forget_and_judge(lambda: example.SqliteRuntime({"policy": "every"}))
    assert ob.erasure_checked >= 1  # the secret was in the file before the forget: the check judged it
    assert ob.persisted_log_after == oracle.counterfactual(STREAM, ["z1"])


def test_erasure_catches_a_forgotten_text_left_in_a_side_file(example):
    class Notes(example.SqliteRuntime):  # a journal beside the database, appended to and never rewritten
        def step(self, obs):
            super().step(obs)
            with open(str(self.path) + ".notes", "a") as f:
                f.write(" ".join(p.text for p in obs.parts) + "\n")

    with pytest.raises(SpecViolation, match=r"erasure: .*'session.db.notes'.* still holds the text of a part of 'z1'"):
        forget_and_judge(lambda: Notes({"policy": "every"}))


def test_erasure_catches_a_prefix_kept_verbatim(example):
    class KeepsPrefix(example.SqliteRuntime):  # rewrites the log from the splice point only
        def _save(self, k, c):
            super()._save(max(k, c), c)

    with pytest.raises(SpecViolation, match=r"erasure: .* the log read back .* differs at t=1"):
        forget_and_judge(lambda: KeepsPrefix({"policy": "every"}))


def test_erasure_catches_states_left_after_the_splice(example):
    class KeepsStates(example.SqliteRuntime):  # never deletes the checkpointed states of the old suffix
        def _save(self, k, c):
            self.db.execute("CREATE TABLE IF NOT EXISTS old (boundary INTEGER, state TEXT)")
            self.db.execute("INSERT INTO old SELECT * FROM states WHERE boundary > ?", (c,))
            super()._save(k, c)

    with pytest.raises(SpecViolation, match="erasure: .*still holds persisted secret"):
        forget_and_judge(lambda: KeepsStates({"policy": "every"}))


def database_of(example):
    """The example runtime after STREAM (its folder lives as long as it does)."""
    rt = example.SqliteRuntime({"policy": "every"})
    for o in STREAM:
        rt.step(o)
    return rt


def test_the_seal_obligation_edits_every_column_and_each_edit_is_refused(example):
    rt = database_of(example)
    edited = E.integrity_every_persisted_column_is_sealed(rt.persisted_database(), lambda p: P.accepts(rt, p))
    every, filled = E.columns_with_rows(rt.persisted_database())
    assert set(edited) == filled == every  # log, states, world (the send committed at 3), meta


def test_the_seal_obligation_catches_a_table_outside_the_seal(example, monkeypatch):
    def leaves_out_world(db):  # every table but the side-effect ledger
        rows = [(t, list(db.execute(f'SELECT * FROM "{t}" ORDER BY 1'))) for (t,) in
                db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT IN ('world', 'meta')")]
        return hashlib.sha256(json.dumps(rows).encode()).hexdigest()

    monkeypatch.setattr(example, "seal", leaves_out_world)
    rt = database_of(example)
    with pytest.raises(SpecViolation, match=r"seal: the runtime accepts its database with world\.\w+ of one row edited"):
        E.integrity_every_persisted_column_is_sealed(rt.persisted_database(), lambda p: P.accepts(rt, p))


def test_a_refused_unedited_copy_proves_nothing(example, tmp_path):
    rt = database_of(example)
    with pytest.raises(SpecViolation, match="refuses an unedited copy"):
        E.integrity_every_persisted_column_is_sealed(rt.persisted_database(), lambda p: False)


def test_the_hooks_values_are_checked(example):
    class Wrong(example.SqliteRuntime):
        def persisted_files(self):
            return [self.path.read_bytes()]

    with pytest.raises(ProtocolViolation, match=r"persisted files as a list.*persisted_files\(\) returns a mapping"):
        P.persisted_files(Wrong({"policy": "every"}))


def test_compensation_lists_a_call_committed_at_tau():
    """A3 at its boundary, the model against the oracle: a replay spliced at c lists every committed
    call after c that it never makes, the one committed at c+1 (τ, under the every policy) included,
    and none committed at c or before."""
    from unsee.model.plan import compensation

    for c in range(0, 4):
        world = tuple(LedgerEntry(f"call-t{t - 1}", "send", json.dumps({"n": t}), t) for t in (c, c + 1, c + 2) if t)
        _, got = compensation(world, (), c)
        want = oracle.compensation(world, (), c)
        assert sorted(e["call_id"] for e in got) == sorted(e["call_id"] for e in want) == \
            [f"call-t{c}", f"call-t{c + 1}"], c


def test_the_generators_commit_calls_at_tau_minus_one_tau_and_tau_plus_one():
    from unsee.specs.harness import PERSISTENCE_TARGETS, SIDE_EFFECT_TARGETS, verify
    from unsee.specs.runtimes import reference

    doc = verify(lambda cfg: (lambda: reference(cfg)), examples=30, seed=0)
    assert not doc["failures"]
    for target in SIDE_EFFECT_TARGETS:  # the reference fires side effects: the targets apply to it
        assert doc["targets"][target]["forgets"] > 0, target
    assert not set(PERSISTENCE_TARGETS) & set(doc["targets"])  # it persists nothing: those do not


def test_the_sqlite_example_passes_random_sessions_with_every_check_reached(example):
    from unsee.specs.harness import verify

    doc = verify(lambda cfg: lambda: example.SqliteRuntime(cfg), examples=40, seed=0)
    assert doc["failures"] == [], doc["failures"][0]["message"]
    assert doc["coverage"]["forgotten bytes persisted before the forget"] > 0
    assert doc["seal"]["databases_edited"] >= 3 and not doc["seal"]["never_edited"]


def test_the_guide_lists_every_persistence_hook():
    guide = (ROOT / "docs" / "verify-your-runtime.md").read_text()
    section = guide[guide.index("### What your runtime persists"):guide.index("### The observation")]
    for member in P.PERSISTENCE:
        assert f"| `{member}` |" in section, member
