"""One writer: races between real processes on one store, each in a loop.

- an `Agent` that keeps stepping while `unsee forget` runs on its store: the forget succeeds,
  every step the agent saw return is in the store afterwards, and the store opens, verifies and
  re-derives exactly;
- two `unsee run` to one path: one stores its session, the other is refused, nothing replaced;
- a process that opens the store while a forget runs: no false "interrupted forget", and the
  forget's intent marker is left alone.

UNSEE_RACE_LOOPS sets the iterations (default 10; the documented full run uses 100).
"""

import json
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from unsee.impl.store.episode import write_episode
from unsee.impl.store.sqlite import Store
from unsee.model import Observation, Part

pytestmark = pytest.mark.tiny

LOOPS = int(os.environ.get("UNSEE_RACE_LOOPS", "10"))
EXE = str(Path(sys.executable).parent / "unsee")

AGENT = textwrap.dedent("""
    import sys
    import time
    from unsee.impl.store.agent import Agent
    from unsee.model import Observation, Part

    agent = Agent.open(sys.argv[1])
    for i in range(int(sys.argv[2])):
        agent.step(Observation("user", (Part(f"s{i}", f"step {i} please"),), reply=2))
        print(f"s{i}", flush=True)  # returned: persisted
        time.sleep(0.03)  # a user between turns: the forget lands among the steps
    agent.close()
""")


def episode(n: int = 10) -> list[Observation]:
    obs = [Observation("system", (Part("sys", "you are an agent"),))]
    for t in range(2, n + 1):
        part = Part("z", "the code is 7731") if t == 3 else Part(f"u{t}", f"turn {t} please help")
        obs.append(Observation("memory" if t == 3 else "user", (part,), reply=0 if t == 3 else 3,
                               tool="send" if t % 4 == 0 else None))
    return obs


def run_store(tmp_path: Path, name: str) -> Path:
    ep = tmp_path / f"{name}.jsonl"
    write_episode(ep, episode())
    db = tmp_path / name
    subprocess.run([EXE, "run", str(ep), "--db", str(db), "--model", "reference"], check=True, capture_output=True)
    return db


def check_exact(db: Path) -> None:
    p = subprocess.run([EXE, "check", "--db", str(db)], capture_output=True, text=True)
    assert p.returncode == 0 and "exact=True" in p.stdout, p.stdout + p.stderr


def test_a_step_during_a_forget_is_never_lost(tmp_path):
    rng = random.Random(11)
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    landed = []
    for i in range(LOOPS):
        db = run_store(tmp_path, f"a{i}.db")
        agent = subprocess.Popen([sys.executable, str(script), str(db), "40"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(0.3, 0.9))
        forget = subprocess.run([EXE, "forget", "--db", str(db), "--source", "z"], capture_output=True, text=True)
        out, err = agent.communicate(timeout=300)
        assert agent.returncode == 0, err
        assert forget.returncode == 0, forget.stdout + forget.stderr
        acknowledged = out.split()
        assert len(acknowledged) == 40
        st = Store(db)
        sources = st.sources()
        assert st.is_forgotten("z") and "z" not in sources
        assert set(acknowledged) <= sources, f"iteration {i}: steps lost: {set(acknowledged) - sources}"
        assert st.length() == 10 + 40
        landed.append(st.receipts()[-1]["T"])  # how many steps the forget's session held
        st.close()
        check_exact(db)
    assert any(10 < T < 50 for T in landed), f"no forget landed while the agent was stepping: {landed}"


def test_two_runs_to_one_path_store_one_session_and_refuse_the_other(tmp_path):
    ep = tmp_path / "e.jsonl"
    write_episode(ep, episode())
    other = tmp_path / "o.jsonl"
    write_episode(other, episode(14))
    for i in range(LOOPS):
        db = tmp_path / f"r{i}.db"
        procs = [subprocess.Popen([EXE, "run", str(e), "--db", str(db), "--model", "reference"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for e in (ep, other)]
        outs = [p.communicate(timeout=120)[0] for p in procs]
        codes = sorted(p.returncode for p in procs)
        assert codes == [0, 2], outs
        winner = 10 if procs[0].returncode == 0 else 14
        loser = outs[1] if procs[0].returncode == 0 else outs[0]
        # the loser is refused whether it came while the winner built the store or after it was in place
        assert ("already exists" in loser or "another run is creating" in loser) and "stored" not in loser
        st = Store(db)
        assert st.length() == winner
        st.close()
        check_exact(db)


def test_opening_during_a_forget_leaves_its_intent_marker_alone(tmp_path):
    for i in range(LOOPS):
        db = run_store(tmp_path, f"o{i}.db")
        env = {**os.environ, "UNSEE_FAILPOINT": "begin:sleep", "UNSEE_FAILPOINT_SLEEP": "1.5"}
        forget = subprocess.Popen([EXE, "forget", "--db", str(db), "--source", "z"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 30
        marker = Path(str(db) + ".unsee-intent")  # beside the store, never in it
        while time.time() < deadline:  # wait until the forget holds the lock and wrote its marker
            if marker.exists():
                break
            time.sleep(0.02)
        assert marker.exists()
        opened = Store(db)  # a second process's open, while the forget runs
        assert opened.recovered is None
        assert marker.exists()
        opened.close()
        out = forget.communicate(timeout=120)[0]
        assert forget.returncode == 0 and "rolled back" not in out, out
        st = Store(db)
        assert st.recovered is None and not marker.exists() and st.is_forgotten("z")
        st.close()


def test_two_agents_in_threads_of_one_process_take_turns(tmp_path):
    import threading

    from unsee.impl.store.agent import Agent

    db = run_store(tmp_path, "threads.db")
    acknowledged: dict[str, list[str]] = {"a": [], "b": []}
    errors = []

    def work(name: str) -> None:
        try:
            agent = Agent.open(db)
            for i in range(15):
                agent.step(Observation("user", (Part(f"{name}{i}", f"{name} step {i}"),), reply=2))
                acknowledged[name].append(f"{name}{i}")
            agent.close()
        except Exception as e:  # noqa: BLE001 - reported below with the thread's name
            errors.append((name, e))

    threads = [threading.Thread(target=work, args=(n,)) for n in acknowledged]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    st = Store(db)
    assert set(acknowledged["a"] + acknowledged["b"]) <= st.sources() and st.length() == 10 + 30
    st.close()
    check_exact(db)


def test_an_agent_that_read_the_store_before_another_saved_steps_on_top_of_it(tmp_path, monkeypatch):
    """An agent's session and the root it compares before saving are one read: a save that lands
    after `Agent.open` read the store (or after its forget saved), before its next step, makes
    that step reopen the store instead of overwriting the other step. Both races are forced here:
    the other agent steps at exactly those points."""
    import unsee.impl.store.agent as session
    from unsee.impl.store.agent import Agent

    db = run_store(tmp_path, "read.db")
    other = Agent.open(db)
    open_runtime, forget_stored = session.open_runtime, session.forget_stored

    def other_steps(source):
        other.step(Observation("user", (Part(source, f"{source} please"),), reply=2))

    def open_then_other_steps(store, **kw):
        rt = open_runtime(store, **kw)
        other_steps("a0")  # after this agent's read, before it returns
        return rt

    monkeypatch.setattr(session, "open_runtime", open_then_other_steps)
    agent = Agent.open(db)
    monkeypatch.setattr(session, "open_runtime", open_runtime)
    agent.step(Observation("user", (Part("b0", "b0 please"),), reply=2))

    def forget_then_other_steps(*args, **kw):
        out = forget_stored(*args, **kw)
        other_steps("a1")  # after this agent's forget saved, before it returns
        return out

    monkeypatch.setattr(session, "forget_stored", forget_then_other_steps)
    agent.forget(["z"])
    monkeypatch.setattr(session, "forget_stored", forget_stored)
    agent.step(Observation("user", (Part("b1", "b1 please"),), reply=2))
    agent.close()
    other.close()
    st = Store(db)
    assert {"a0", "b0", "a1", "b1"} <= st.sources() and st.length() == 10 + 4 and st.is_forgotten("z")
    st.close()
    check_exact(db)


def test_a_forget_that_fails_after_its_replay_leaves_the_next_step_on_the_stored_state(tmp_path, monkeypatch):
    """A forget replays on the agent's own runtime before it saves; when the save fails (a full
    disk, an interrupt), the runtime holds a state the store does not. The next step must build on
    the store's state, not on that one."""
    import unsee.impl.store.agent as session
    from unsee.impl.store.agent import Agent

    db = run_store(tmp_path, "failed.db")
    agent = Agent.open(db)

    def replay_then_fail(store, sources, method, rt, head):
        rt.forget(list(sources), method=method)  # the replay, in place
        raise OSError("database or disk is full")

    monkeypatch.setattr(session, "forget_stored", replay_then_fail)
    with pytest.raises(OSError):
        agent.forget(["z"])
    monkeypatch.undo()
    agent.step(Observation("user", (Part("b0", "b0 please"),), reply=2))
    agent.close()
    st = Store(db)
    assert "z" in st.sources() and "b0" in st.sources() and not st.is_forgotten("z") and st.length() == 11
    st.close()
    check_exact(db)
