"""Erasure on the session store (`unsee.impl.store.kit`): after a forget no byte of the target is in
the store's file or beside it, and the log read back from it is o^-z, with the kit's own statement
(`unsee.specs.erasure`) as the judge. Each way the store could keep the target is planted and caught:
the prefix log kept verbatim, the K/V pages born after the splice left in the file."""

import pytest

from unsee.impl.store.kit import StoredRuntime
from unsee.impl.store.sqlite import Store
from unsee.model import Observation, Part
from unsee.specs import erasure as E
from unsee.specs import oracle
from unsee.specs import statements as S
from unsee.specs.protocol import SpecViolation

SECRET = "gamma delta secret words"
# o_1 holds a part of z1 standing instead of s1's (F never reads it; the log before τ holds it), z1
# enters visibly at τ = 2, and o_2 asks for the consequential tool (its call commits at 3)
STREAM = (Observation("user", (Part("s1", "alpha beta"), Part("z1", SECRET, instead_of="s1")), reply=1),
          Observation("user", (Part("z1", SECRET),), reply=2, tool="send"),
          Observation("user", (Part("s3", "epsilon zeta"),), reply=1))


def judged(model: str = "reference") -> S.Observed:
    ob = S.observe(lambda: StoredRuntime(model), STREAM, ["z1"], policy="every")
    S.check_all(ob)
    return ob


def test_the_stored_runtime_persists_no_byte_of_a_forgotten_part():
    ob = judged()
    assert ob.erasure_checked >= 1
    assert ob.persisted_log_after == oracle.counterfactual(STREAM, ["z1"])
    assert not any(SECRET.encode() in b for b in ob.persisted_after.values())


def test_erasure_catches_a_store_that_keeps_the_prefix_verbatim(monkeypatch):
    """`_log_from` rewriting the log from the splice point only: o_1 keeps the hidden part of z1."""
    log_from = Store._log_from
    monkeypatch.setattr(Store, "_log_from", lambda self, s, c, receipt: log_from(self, s, c, None))
    with pytest.raises(SpecViolation, match=r"erasure: .*the log read back .* differs at t=1"):
        judged()


def test_erasure_is_vacuous_where_nothing_was_persisted_before():
    """A byte run counts only when it was persisted before the forget: a runtime without the hooks,
    or a needle absent before, is not judged (and `erasure_checked` says so)."""
    ob = S.Observed(STREAM, ("z1",), 2, forgotten=(("z1", SECRET),), persisted_before={"a": b""},
                    persisted_after={"a": SECRET.encode()}, twin_persisted={})
    E.erasure_nothing_forgotten_is_persisted(ob)
    assert ob.erasure_checked == 0


@pytest.mark.tiny
def test_a_forget_deletes_the_pages_born_after_the_splice(monkeypatch):
    """tiny-llama, K/V pages kept: the pages of the old suffix (their rows are z's) leave the file;
    a `_clear` that keeps them is caught by the erasure statement through `persisted_secrets`."""
    ob = judged("tiny-llama")
    assert ob.erasure_checked >= 2  # the text and the pages born at or after τ
    clear = Store._clear

    def keeps_pages(self, c, k):
        saved = self.db.execute("SELECT key, born, data, digest FROM pages WHERE born > ?", (c,)).fetchall()
        clear(self, c, k)
        self.db.executemany("INSERT OR IGNORE INTO pages VALUES (?, ?, ?, ?)", saved)

    monkeypatch.setattr(Store, "_clear", keeps_pages)
    with pytest.raises(SpecViolation, match=r"erasure: .*still holds bytes \d+\.\.\d+ of persisted secret"):
        judged("tiny-llama")


def test_the_store_forgets_a_source_that_entered_again_after_its_forget():
    """z1 forgotten, then entered again with the same text: the store forgets it again, and opens in
    between (its ledger records the re-entry, so the tombstone is not taken for a restored backup)."""
    rt = StoredRuntime("reference")
    try:
        rt.step(STREAM[1])
        rt.step(STREAM[2])
        rt.forget(["z1"])
        rt.step(STREAM[1])  # z1 enters again
        st = Store(rt.path)  # an open checks the tombstones: the re-entry is no restored backup
        st.verify()
        st.close()
        rt.forget(["z1"])
        assert SECRET not in " ".join(p.text for o in rt.observations for p in o.parts)
    finally:
        rt.close()
