"""The Python API for an agent that stays up: open a store → step → forget → check."""

import pytest

from unsee.impl.store.agent import Agent
from unsee.impl.store.errors import StoreError
from unsee.model import Observation, Part

pytestmark = pytest.mark.tiny


def obs(kind, source, text, **kw):
    return Observation(kind, (Part(source, text),), **kw)


@pytest.mark.parametrize("model", ["reference", "tiny-llama"])
def test_step_forget_check_with_the_model_kept_loaded(tmp_path, model):
    db = tmp_path / "agent.db"
    with Agent.create(db, model=model) as agent:
        agent.step(obs("system", "sys", "You are a travel assistant."))
        agent.step(obs("user", "u1", "Plan a weekend in Lisbon.", reply=6))
        agent.step(obs("memory", "addr", "The user lives at 42 Wallaby Way."))
        agent.step(obs("user", "u2", "Ship the guide to my home.", reply=6, tool="send"))
        agent.step(obs("user", "u3", "Thanks.", reply=4))
        receipt = agent.forget(["addr"])
        assert (receipt["tau"], receipt["T"], receipt["transitions"]) == (3, 5, 3)
        assert receipt["tokens_rematerialized"] == 0  # the live cache was cropped, nothing re-read
        agent.step(obs("user", "u4", "One more thing.", reply=4))  # the session goes on after a forget
        assert agent.check()["exact"]
    with Agent.open(db) as again:  # a new process would see the same
        assert again.session.T == 6 and again.check()["exact"]
        again.step(obs("user", "u5", "Bye.", reply=2))
        with pytest.raises(Exception, match="already forgotten"):
            again.forget(["addr"])
        assert again.check()["exact"]


def test_create_refuses_an_existing_session(tmp_path):
    db = tmp_path / "agent.db"
    Agent.create(db, model="reference").close()
    with pytest.raises(StoreError, match="already exists"):
        Agent.create(db, model="reference")



def test_create_gives_the_path_back_when_the_run_fails(tmp_path):
    """Agent.create claims its path first; a model that does not load, or a run stopped midway
    (Ctrl-C), leaves no file behind (what `unsee run` relies on)."""
    from unsee.model import UnseeError

    db = tmp_path / "agent.db"
    with pytest.raises(UnseeError, match="unknown model"):
        Agent.create(db, model="no-such-model")
    assert sorted(tmp_path.iterdir()) == []

    def stop():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Agent.create(db, model="reference", observations=[obs("user", "u1", "hi", reply=1)], on_step=stop)
    assert sorted(tmp_path.iterdir()) == []
