"""The user's own LangGraph graphs under exact forgetting (unsee.impl.integrations.langgraph).

Two graphs as a user writes them: a `create_react_agent` with a read-only and a consequential
tool, and a custom `StateGraph` with a summarization node, on a SQLite checkpointer. A forget
lands bit for bit on a fresh thread run on the inputs without the target (messages, tool calls
with their JSON arguments, state values, K/V under torch.equal) after T−τ+1 turns, fires no
call again, and leaves no byte of the target in the file or its WAL; the conformance kit passes
on a runtime over each graph and rejects a fork at τ.
"""

import importlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("langgraph", reason="install the test extras: bash scripts/setup.sh --tests")

import torch
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.prebuilt import create_react_agent

from unsee.model.grammar import JsonSchema
from unsee.model.errors import UnseeError
from unsee.model.state import Observation, Part
from unsee.specs import oracle
from unsee.specs.harness import verify
from unsee.specs.vectors import load_vectors, run_vectors

from unsee.impl.integrations import langgraph as L
from unsee.impl.integrations.langgraph import kit as R

ROOT = Path(__file__).resolve().parents[2]
SECRET = "my diagnosis is type 2 diabetes keep it private"


def factory_for(make):
    return lambda cfg: (lambda: make(cfg))


def file_bytes(path: Path) -> bytes:
    """The SQLite file and whatever sidecar files (WAL, shared memory, journal) it has."""
    return b"".join(p.read_bytes() for p in sorted(path.parent.glob(path.name + "*")))


def episode() -> list[Observation]:
    """Five turns; the medical detail `med` enters at turn 3, before two more user turns."""
    def o(src, text, kind="user"):
        return Observation(kind, (Part(src, text),))

    return [o("sys", "you are a medical assistant", "system"), o("u1", "hello i need a doctor"),
            o("med", SECRET), o("u3", "please book a visit for me"), o("u4", "thanks")]


class Counted:
    """The example's tools as LangGraph's documentation writes tools (the README's snippet runs
    them verbatim), with the number of times each one really ran. `Text=R.Short` bounds the
    arguments, which keeps a tiny model's calls short."""

    def __init__(self, Text=str) -> None:
        self.runs = {"find_doctor": 0, "book_appointment": 0}

        @tool
        def find_doctor(specialty: Text) -> str:
            """Find a doctor for a medical specialty."""
            self.runs["find_doctor"] += 1
            return f"Dr. Rivera sees {specialty} patients"

        @tool
        def book_appointment(doctor: Text, reason: Text) -> str:
            """Book an appointment with a doctor, giving the reason for the visit."""
            self.runs["book_appointment"] += 1
            return R.booked(doctor, reason)

        self.tools = [L.read_only(find_doctor), L.consequential(book_appointment, result=R.booked)]


def forgotten_thread(build, tmp_path_factory):
    path = tmp_path_factory.mktemp("lg") / "checkpoints.sqlite"
    tools = Counted(R.Short)
    rt = R.GraphRuntime(lambda llm, saver: build(llm, saver, tools.tools), path=str(path))
    for o in episode():
        rt.step(o)
    before = {"bytes": file_bytes(path), "runs": dict(tools.runs), "world": rt.world, "digest": rt.digest(),
              "values": rt.values()}
    receipt = rt.forget(["med"])
    twin = R.GraphRuntime(lambda llm, saver: build(llm, saver, Counted(R.Short).tools))
    for o in episode():
        twin.step(o.without(frozenset({"med"})))
    return rt, twin, receipt, before, path, tools


@pytest.fixture(scope="module", params=["react", "summarizing"])
def forgotten(request, tmp_path_factory):
    return forgotten_thread(R.GRAPHS[request.param], tmp_path_factory) + (request.param,)


def test_the_module_names_the_extra_when_langgraph_is_missing(monkeypatch):
    for name in [m for m in sys.modules if m.startswith("unsee.impl.integrations.langgraph")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "langgraph", None)  # import langgraph → ImportError
    with pytest.raises(ImportError, match=r"pip install unsee\[langgraph\]"):
        importlib.import_module("unsee.impl.integrations.langgraph")


def calls_in(rt) -> list[dict]:
    """Every tool call the thread's lineage holds, in order."""
    seen = {}
    for t in L.lineage(rt.saver, rt.thread_id):
        for m in t.checkpoint["channel_values"].get("messages") or []:
            for c in getattr(m, "tool_calls", []):
                seen.setdefault(c["id"], c)
    return list(seen.values())


@pytest.mark.tiny
def test_forget_equals_a_fresh_thread_bit_for_bit(forgotten):
    rt, twin, r, before, _, _, kind = forgotten
    assert R.same_thread(rt, twin) == []
    va, vb = rt.values(), twin.values()
    calls = calls_in(rt)  # the summarization node drops older messages from the head: read every checkpoint
    assert calls and calls == calls_in(twin)
    assert all(isinstance(c["args"], dict) and c["args"] for c in calls), "tool calls carry JSON arguments"
    if kind == "summarizing":
        assert va["summary"] and va["summary"] == vb["summary"], "the summarization node ran"
    ka, kb = rt.kv(), twin.kv()
    assert len(ka) == len(kb) > 0 and all(torch.equal(x, y) for p, q in zip(ka, kb) for x, y in zip(p, q))
    assert rt.digest() == twin.digest() != before["digest"]
    assert not any(SECRET in str(m.content) for m in va["messages"])


@pytest.mark.tiny
def test_forget_replays_T_minus_tau_plus_one_turns(forgotten):
    rt, _, r, _, _, _, kind = forgotten
    assert (r.tau, r.T, r.checkpoint) == (3, 5, 2)
    if kind == "react":  # every model turn of the replay is on the new branch (no summary leaves it)
        written = [m for t in L.lineage(rt.saver, rt.thread_id) for m in t.checkpoint["channel_values"].get("messages") or []
                   if isinstance(m, AIMessage)]
        assert r.work.replies == len({m.id for m in written}) - len({m.id for m in before_tau(rt, r)}) > 0
    assert 0 <= r.work.replies_skipped <= r.work.replies
    assert r.transitions == r.T - r.tau + 1 == len(r.replayed) == 3
    assert rt.invocations == r.T + r.transitions
    assert list(rt.observations) == [o.without(frozenset({"med"})) for o in episode()]
    assert r.exactness == "checked"


def before_tau(rt, r) -> list:
    """The model's messages in R_c, the state the forget forked from."""
    end = L.turns(rt.saver, rt.thread_id)[r.checkpoint - 1].end
    return [m for m in end.checkpoint["channel_values"]["messages"] if isinstance(m, AIMessage)]


@pytest.mark.tiny
def test_no_consequential_call_fires_again(forgotten):
    rt, twin, r, before, _, tools, _ = forgotten
    assert tools.runs["book_appointment"] == before["runs"]["book_appointment"] > 0
    assert rt.world == before["world"]
    want = oracle.compensation(before["world"], twin.world, r.checkpoint)  # the world against the twin's
    assert sorted(r.compensation, key=lambda c: c["call_id"]) == want and want
    assert sorted(r.deduplicated) == oracle.deduplicated(before["world"], twin.world, r.checkpoint)
    for c in r.compensation:  # decoded JSON arguments, as the schema has them
        for args in (c["args"], c["committed"]):
            assert args is None or set(args) == {"doctor", "reason"}


@pytest.mark.tiny
def test_no_target_byte_stays_in_the_checkpointer_file(forgotten):
    rt, _, r, before, path, _, _ = forgotten
    assert SECRET.encode() in before["bytes"], "the target was in the file before the forget"
    after = file_bytes(path)
    for needle in (SECRET.encode(), b"type 2 diabetes", b"keep it private"):
        assert needle not in after, needle
    assert r.checkpoints_deleted > 0 and r.writes_deleted > 0
    ids = {t.config["configurable"]["checkpoint_id"] for t in L.lineage(rt.saver, rt.thread_id)}
    stored = {row[0] for row in rt.conn.execute("SELECT checkpoint_id FROM checkpoints WHERE thread_id = ?",
                                                (rt.thread_id,))}
    assert stored == ids, "only the head's lineage is left"


# --- tool calls with JSON arguments -------------------------------------------------------------------

@pytest.fixture(scope="module")
def llm():
    return L.UnseeChatModel.from_model("tiny-llama")


@pytest.mark.tiny
def test_bind_tools_puts_names_descriptions_and_schemas_in_the_prompt(llm):
    tools = Counted().tools
    specs = [convert_to_openai_tool(t) for t in tools]
    toks, _ = llm.tools_block(specs)
    words = {llm.context.template.word(w) for w in ("find_doctor", "book_appointment", "specialty", "reason")}
    assert words <= set(toks), "every name and argument is in the tool block"
    msg = llm.bind_tools(tools).invoke([HumanMessage("hello i need a doctor")])
    (call,) = msg.tool_calls
    assert call["name"] in {"find_doctor", "book_appointment"}
    schema = next(s["function"]["parameters"] for s in specs if s["function"]["name"] == call["name"])
    assert JsonSchema(schema).validate(json.dumps(call["args"], separators=(",", ":"))) == call["args"]
    forced = llm.bind_tools(tools, tool_choice="find_doctor").invoke([HumanMessage("hello i need a doctor")])
    assert [c["name"] for c in forced.tool_calls] == ["find_doctor"] and set(forced.tool_calls[0]["args"]) == {"specialty"}
    after = llm.bind_tools(tools).invoke([HumanMessage("hi"), msg, ToolMessage("ok", tool_call_id=call["id"])])
    assert not after.tool_calls and after.content, "after a tool's result the model answers"


@pytest.mark.tiny
def test_bind_tools_refuses_an_unknown_tool_choice(llm):
    with pytest.raises(UnseeError, match="not one of the bound tools"):
        llm.bind_tools(Counted().tools, tool_choice="send_email")


# --- what a graph must satisfy -------------------------------------------------------------------------

class Scripted(BaseChatModel):
    """A deterministic stand-in for a hosted model: books with the user's words as the reason."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools, **kw):
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools])

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        last, n = messages[-1], len(messages)
        if kw.get("tools") and isinstance(last, HumanMessage) and "twice" in last.text:
            call = {"name": "book_appointment", "type": "tool_call", "args": {"doctor": "Dr. Rivera", "reason": "checkup"}}
            msg = AIMessage("", id=f"a{n}", tool_calls=[{**call, "id": f"c{n}.{k}"} for k in (1, 2)])
        elif kw.get("tools") and isinstance(last, HumanMessage) and "diagnosis" in last.text:
            msg = AIMessage("", id=f"a{n}", tool_calls=[{"name": "book_appointment", "id": f"c{n}", "type": "tool_call",
                                                          "args": {"doctor": "Dr. Rivera", "reason": last.text}}])
        else:
            msg = AIMessage(f"noted {n}", id=f"a{n}")
        return ChatResult(generations=[ChatGeneration(message=msg)])


def scripted_agent(path, model):
    saver = SqliteSaver(sqlite3.connect(str(path), check_same_thread=False))
    tools = Counted()
    return create_react_agent(model, tools.tools, checkpointer=saver), tools


def run(agent, inputs, thread="t1", without=()):
    """One invoke per input; a forgotten source's turn is still a turn, with no message."""
    for src, text in inputs:
        msgs = [] if src in without else [L.source_message(text, src)]
        agent.invoke({"messages": msgs}, {"configurable": {"thread_id": thread}})


MEDICAL = [("u1", "hello"), ("med", SECRET), ("u2", "thanks")]


def test_a_detail_in_a_consequential_calls_arguments_is_listed_for_compensation(tmp_path):
    agent, tools = scripted_agent(tmp_path / "a.sqlite", L.deterministic(Scripted()))
    run(agent, MEDICAL)
    r = L.forget(agent, "t1", ["med"])
    assert r.exactness == "declared", "a declared model is replayed unchecked, and the receipt says so"
    assert tools.runs["book_appointment"] == 1, "the booking fired once, never again"
    (entry,) = r.compensation
    assert entry["reason"] == "counterfactual makes no such call" and entry["args"] is None
    assert entry["committed"] == {"doctor": "Dr. Rivera", "reason": SECRET}, "decoded JSON arguments"
    twin, _ = scripted_agent(tmp_path / "b.sqlite", L.deterministic(Scripted()))
    run(twin, MEDICAL, without={"med"})
    va = R.thread_values(agent.get_state({"configurable": {"thread_id": "t1"}}).values)
    assert va == R.thread_values(twin.get_state({"configurable": {"thread_id": "t1"}}).values)


def test_two_identical_committed_calls_of_a_turn_are_each_recognised(tmp_path):
    agent, tools = scripted_agent(tmp_path / "a.sqlite", L.deterministic(Scripted()))
    run(agent, [("u1", "hello"), ("z", "noise"), ("u2", "book twice")])
    world = L.World(agent.checkpointer).entries("t1")
    assert [e.call_id.endswith("#2") for e in world] == [False, True] and world[0].args == world[1].args
    r = L.forget(agent, "t1", ["z"])
    assert sorted(r.deduplicated) == sorted(e.call_id for e in world) and r.compensation == ()
    assert tools.runs["book_appointment"] == 2 and L.World(agent.checkpointer).entries("t1") == world


def test_a_model_not_declared_deterministic_is_refused(tmp_path):
    agent, _ = scripted_agent(tmp_path / "a.sqlite", Scripted())
    run(agent, MEDICAL)
    with pytest.raises(UnseeError, match=r"deterministic\(model\)"):
        L.forget(agent, "t1", ["med"])


def test_an_unmarked_tool_is_refused(tmp_path):
    saver = SqliteSaver(sqlite3.connect(str(tmp_path / "a.sqlite"), check_same_thread=False))
    agent = create_react_agent(L.deterministic(Scripted()), [R.find_doctor], checkpointer=saver)
    run(agent, MEDICAL[:1])
    with pytest.raises(UnseeError, match=r"read_only\(find_doctor\) or consequential\(find_doctor\)"):
        L.forget(agent, "t1", ["u1"])


def test_an_untagged_input_is_named_by_its_place(tmp_path):
    """An input without a source id is an ordinary message: its source is its place, t<turn>.<k>."""
    agent, _ = scripted_agent(tmp_path / "a.sqlite", L.deterministic(Scripted()))
    cfg = {"configurable": {"thread_id": "t1"}}
    agent.invoke({"messages": [HumanMessage("hello")]}, cfg)
    agent.invoke({"messages": [("user", "second"), L.source_message("third", "u3")]}, cfg)
    assert [(s["source"], s["turn"], s["tagged"]) for s in L.sources(agent, "t1")] == \
        [("t1.1", 1, False), ("t2.1", 2, False), ("u3", 2, True)]
    with pytest.raises(UnseeError, match=r"known sources: \['t1.1', 't2.1', 'u3'\]"):
        L.forget(agent, "t1", ["u1"])
    r = L.forget(agent, "t1", ["t2.1"])
    assert (r.tau, r.transitions) == (2, 1)
    assert [m.content for m in agent.get_state(cfg).values["messages"] if isinstance(m, HumanMessage)] == \
        ["hello", "third"]


def test_an_unknown_source_names_the_known_ones(tmp_path):
    agent, _ = scripted_agent(tmp_path / "a.sqlite", L.deterministic(Scripted()))
    run(agent, MEDICAL)
    with pytest.raises(UnseeError, match="known sources"):
        L.forget(agent, "t1", ["nope"])


# --- the conformance kit ---------------------------------------------------------------------------------

@pytest.mark.tiny
@pytest.mark.parametrize("make", [R.langgraph_tiny_llama, R.langgraph_summarizing_tiny_llama])
def test_the_kit_passes_on_random_sessions(make):
    doc = verify(factory_for(make), examples=2, seed=0, max_steps=4, directed=False)  # (placements: nightly)
    assert not doc["failures"], doc["failures"][0]["message"] + "\n" + "\n".join(doc["failures"][0]["trace"])
    assert doc["forgets"] > 0 and doc["exact"] == doc["optimal_invocations"] == doc["forgets"]


class ForkAtTau(R.GraphRuntime):
    """A mutant the kit must reject: its forget forks from the checkpoint after turn τ, not τ−1."""

    def forget(self, sources, method="B7", checkpoint=None):
        from dataclasses import replace

        import importlib

        F = importlib.import_module("unsee.impl.integrations.langgraph.job")

        real = F.plan_forget

        def one_late(s, srcs, cp=None, reset=False):
            plan = real(s, srcs, cp, reset)
            later = next((c for c in s.checkpoints if c.boundary == plan.boundary + 1), plan.checkpoint)
            return replace(plan, checkpoint=later)
        F.plan_forget = one_late
        try:
            return super().forget(sources, method, checkpoint)
        finally:
            F.plan_forget = real


def langgraph_fork_at_tau(cfg: dict) -> R.GraphRuntime:
    return ForkAtTau(R.react_agent, "tiny-llama", R._cfg(cfg))


@pytest.mark.tiny
def test_the_kit_rejects_a_fork_at_tau():
    doc = verify(factory_for(langgraph_fork_at_tau), examples=2, seed=0, max_steps=4, shrink_seconds=1,
                 directed=False)  # (the directed placements on a real model: the nightly run's)
    assert doc["failures"], "the kit passed an integration that forks at τ instead of τ−1"
    f = doc["failures"][0]
    assert "Corollary 1" in f["message"] or "Theorem 1" in f["message"], f["message"]


@pytest.mark.slow
def test_the_kit_passes_on_shipped_vectors():
    vectors = load_vectors()[::4]
    report = run_vectors(factory_for(R.langgraph_tiny_llama), vectors)
    assert report["ran"] == sorted(v["id"] for v in vectors)
    assert not report["failures"], report["failures"][0]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["react", "summarizing"])
def test_smollm2_thread_is_bit_exact_against_the_fresh_counterfactual(name, tmp_path):
    path = tmp_path / "checkpoints.sqlite"
    rt = R.GraphRuntime(R.GRAPHS[name], "smollm2", path=str(path))
    for o in episode():
        rt.step(o)
    r = rt.forget(["med"])
    twin = R.GraphRuntime(R.GRAPHS[name], "smollm2")
    for o in episode():
        twin.step(o.without(frozenset({"med"})))
    assert R.same_thread(rt, twin) == []
    assert r.transitions == r.T - r.tau + 1
    assert SECRET.encode() not in file_bytes(path)


@pytest.mark.slow
def test_the_kits_command_passes_on_the_langgraph_runtime(tmp_path):
    """The kit as a user runs it."""
    p = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "unsee.specs.conformance",
                        "--unsee-runtime=unsee.impl.integrations.langgraph:langgraph_tiny_llama",
                        "--unsee-max-examples=10", "--unsee-max-steps=10", "-p", "no:cacheprovider", "-q"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=1800, env=dict(os.environ))
    if p.returncode != 0:
        # At 10 examples the run may not reach every coverage target, and the kit refuses to vouch
        # for a placement it never reached. Every statement must still hold: that coverage refusal
        # must be the run's only failure.
        assert "1 failed, 1 passed" in p.stdout and p.stdout.count("FAILED") == 1, p.stdout + p.stderr
        assert "the run never reached" in p.stdout, p.stdout
    else:
        assert "2 passed" in p.stdout, p.stdout + p.stderr


@pytest.mark.slow
def test_smollm2_books_with_the_medical_detail_and_the_forget_lists_it_for_compensation(tmp_path):
    """SmolLM2 copies the diagnosis into the booking's JSON arguments; the forget never fires the
    booking again and shows it, decoded, in the compensation list."""
    tools = Counted()
    rt = R.GraphRuntime(lambda llm, saver: R.react_agent(llm, saver, tools.tools), "smollm2",
                        path=str(tmp_path / "c.sqlite"))
    for o in [Observation("system", (Part("sys", "you are a medical assistant"),)),
              Observation("user", (Part("med", "my diagnosis is type 2 diabetes, please book Dr. Rivera"),))]:
        rt.step(o)
    (fired,) = rt.world
    assert "diabetes" in json.loads(fired.args)["reason"].lower(), fired
    r = rt.forget(["med"])
    assert tools.runs["book_appointment"] == 1 and rt.world == (fired,)
    (entry,) = [c for c in r.compensation if c["committed"] is not None]
    assert entry["committed"] == json.loads(fired.args) and entry["reason"] == "counterfactual makes no such call"


def test_a_part_standing_instead_of_the_target_puts_tau_before_it(tmp_path):
    """model.plan.first_entry: a part shown only without z is read only in the twin's world,
    so the shared prefix ends before it, even though z itself enters later."""
    from unsee.impl.integrations.langgraph.inputs import messages_of

    agent, _ = scripted_agent(tmp_path / "a.sqlite", L.deterministic(Scripted()))
    cfg = {"configurable": {"thread_id": "t1"}}
    stream = [Observation("user", (Part("u1", "hello"), Part("alt", "file size 10", instead_of="z"))),
              Observation("user", (Part("z", SECRET),)), Observation("user", (Part("u2", "thanks"),))]
    for o in stream:
        agent.invoke({"messages": messages_of(o)}, cfg)
    r = L.forget(agent, "t1", ["z"])
    assert (r.tau, r.checkpoint, r.transitions) == (1, 0, 3)
    assert list(r.replayed) == [o.without({"z"}) for o in stream]
    texts = [m.content for m in agent.get_state(cfg).values["messages"]]
    assert "file size 10" in texts and SECRET not in texts
