"""UnseeChatModel's tool calls and answers on the small models, as a LangGraph user writes an agent.

A `create_react_agent` with two tools whose arguments are plain `str` (no maxLength), the way
LangGraph's documentation writes them: on tiny-llama (word-level template, byte grammar) and on
recall-tiny (its own BPE tokenizer and ChatML, so the path SmolLM2 takes: a call in the template's
`<tool_call>` form under the tool's JSON schema, an answer that stops at `<|im_end|>`). A forget
of one turn's source replays to the same tokens, calls and K/V as a fresh thread without it. The
room a call gets comes from its schema, so a schema longer than the old 160-token cap closes.
"""

import json
import sqlite3
from typing import Annotated

import pytest

pytest.importorskip("langgraph", reason="install the test extras: bash scripts/setup.sh --tests")

import torch
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.prebuilt import create_react_agent
from pydantic import Field

from unsee.impl.engine.grammar import call_room, json_bound
from unsee.impl.integrations.langgraph import (
    UnseeChatModel, consequential, forget, read_only, source_message,
)

TURNS = [("u1", "What's the weather like in Paris?"),
         ("mail", "Now send an email to alice@example.com saying the meeting moved to 3pm."),
         ("u3", "Is it raining in Tokyo today?")]
OLD_CAP = 160  # the call-token cap UnseeChatModel had before a call's room came from its schema
Short = Annotated[str, Field(max_length=16)]  # recall-tiny never learnt this call form: bounded, its strings close
TEXT = {"tiny-llama": str, "recall-tiny": Short, "smollm2": str}


class Tools:
    """get_weather(city) and send_email(to, body), as LangGraph's docs write tools, with their runs counted."""

    def __init__(self, Text=str) -> None:
        self.runs = {"get_weather": 0, "send_email": 0}

        @tool
        def get_weather(city: Text) -> str:
            """Get the current weather in a city."""
            self.runs["get_weather"] += 1
            return f"It is sunny and 22 C in {city}."

        @tool
        def send_email(to: Text, body: Text) -> str:
            """Send an email to a recipient with the given body."""
            self.runs["send_email"] += 1
            return sent(to, body)

        self.raw = [get_weather, send_email]
        self.tools = [read_only(get_weather), consequential(send_email, result=sent)]


def sent(to: str, body: str) -> str:
    return f"email sent to {to}"


@tool
def create_contact(first_name: str, last_name: str, email: str, phone: str, street: str, city: str) -> str:
    """Add a person to the address book with their name, email, phone number and postal address."""
    return f"added {first_name} {last_name}"


Long = Annotated[str, Field(max_length=40)]


@tool("create_contact")
def create_contact_bounded(first_name: Long, last_name: Long, email: Long, phone: Long, street: Long,
                           city: Long) -> str:
    """Add a person to the address book with their name, email, phone number and postal address."""
    return f"added {first_name} {last_name}"


def schemas(tools) -> dict:
    return {s["function"]["name"]: s["function"]["parameters"] for s in map(convert_to_openai_tool, tools)}


def conforms(args, schema) -> bool:
    """JSON arguments under a tool's schema as `convert_to_openai_tool` gives it (strings and integers)."""
    props = schema["properties"]
    kinds = {"string": str, "integer": int}
    return isinstance(args, dict) and set(args) == set(props) and all(
        isinstance(v, kinds[props[k]["type"]]) and len(str(v)) <= props[k].get("maxLength", len(str(v)))
        for k, v in args.items())


def agent_on(llm, tools, path):
    saver = SqliteSaver(sqlite3.connect(str(path), check_same_thread=False))
    return create_react_agent(llm, tools, checkpointer=saver)


def run(agent, turns, without=(), thread="t1"):
    for src, text in turns:
        msgs = [] if src in without else [source_message(text, src)]
        agent.invoke({"messages": msgs}, {"configurable": {"thread_id": thread}})
    return agent.get_state({"configurable": {"thread_id": thread}}).values["messages"]


def plain(messages) -> list[dict]:
    """Messages as values, without the ids LangGraph draws at random (the inputs')."""
    return [{k: v for k, v in m.model_dump().items() if k != "id" or not isinstance(m, (HumanMessage, SystemMessage))}
            for m in messages]


def same_kv(a, b) -> bool:
    ka, kb = a.context.kv(), b.context.kv()
    return len(ka) == len(kb) > 0 and all(torch.equal(x, y) for p, q in zip(ka, kb) for x, y in zip(p, q))


def forgotten(model: str, tmp_path, **kw):
    """A three-turn thread, its forget of the e-mail turn, and a fresh thread run without it."""
    tools = Tools(TEXT[model])
    llm = UnseeChatModel.from_model(model, **kw)
    agent = agent_on(llm, tools.tools, tmp_path / "a.sqlite")
    before = run(agent, TURNS)
    runs = dict(tools.runs)
    receipt = forget(agent, "t1", ["mail"])
    after = agent.get_state({"configurable": {"thread_id": "t1"}}).values["messages"]
    twin_llm = UnseeChatModel.from_model(model, **kw)
    twin = run(agent_on(twin_llm, Tools(TEXT[model]).tools, tmp_path / "b.sqlite"), TURNS, without={"mail"})
    return dict(tools=tools, llm=llm, before=before, runs=runs, receipt=receipt, after=after,
                twin=twin, twin_llm=twin_llm)


@pytest.fixture(scope="module", params=["tiny-llama", "recall-tiny", "recall-tiny sampled"])
def thread(request, tmp_path_factory):
    model, _, sampled = request.param.partition(" ")
    kw = {"sampling": True, "seed": 3} if sampled else {}
    return forgotten(model, tmp_path_factory.mktemp("calls"), **kw) | {"model": model, "kw": kw}


@pytest.mark.tiny
def test_every_call_is_json_under_its_tools_schema(thread):
    want = schemas(thread["tools"].raw)
    calls = [c for m in thread["before"] + thread["after"] if isinstance(m, AIMessage) for c in m.tool_calls]
    bad = [m.invalid_tool_calls for m in thread["before"] + thread["after"] if isinstance(m, AIMessage)
           and m.invalid_tool_calls]
    assert calls and not bad
    for c in calls:
        assert conforms(c["args"], want[c["name"]]), c


@pytest.mark.tiny
def test_a_chat_template_call_and_answer_are_whole_turns(thread):
    """On a model with its own tokenizer a call is `<tool_call>\\n{...}\\n</tool_call><|im_end|>`, and an
    answer ends at `<|im_end|>` (or fills max_tokens) and holds no tool tag."""
    if thread["model"] == "tiny-llama":  # no ChatML tokens in its word-level vocabulary: nothing to assert
        # here; its calls are checked valid and whole by the other tests of this module on the same thread
        pytest.skip("the word-level template writes replies of max_tokens words")
    llm = thread["llm"]
    tok = llm.context.template.tok
    for m in thread["before"]:
        if not isinstance(m, AIMessage):
            continue
        toks = m.additional_kwargs["unsee"]["tokens"]
        text = tok.decode(toks)
        if m.tool_calls:
            assert text.startswith("<|im_start|>assistant\n<tool_call>\n{\"name\": \"") and \
                text.endswith("}\n</tool_call><|im_end|>"), text
            (c,) = m.tool_calls
            body = text[len("<|im_start|>assistant\n<tool_call>\n"):-len("\n</tool_call><|im_end|>")]
            assert json.loads(body) == {"name": c["name"], "arguments": c["args"]}
        else:
            n = len(toks) - len(llm.context.template.header("reply"))
            assert text.endswith("<|im_end|>") or n == 256, text
            assert m.content.strip() and "<tool" not in m.content and "<|im_start|>" not in text[1:]


@pytest.mark.tiny
def test_forget_of_a_turn_equals_a_fresh_thread_without_it(thread):
    t = thread
    assert plain(t["after"]) == plain(t["twin"])
    assert same_kv(t["llm"], t["twin_llm"])
    assert not any("alice@example.com" in str(m.content) for m in t["after"])
    assert t["tools"].runs == t["runs"], "no call ran again"
    r = getattr(t["receipt"], "receipt", t["receipt"])
    assert r.transitions == r.T - r.tau + 1 == 2


@pytest.mark.tiny
def test_a_replay_of_the_unchanged_turns_writes_the_same_tokens(thread, tmp_path):
    """A second thread fed the same inputs writes every token the first wrote: calls, answers and
    their stops are a function of the messages alone."""
    t = thread
    again = run(agent_on(UnseeChatModel.from_model(t["model"], **t["kw"]), Tools(TEXT[t["model"]]).tools,
                         tmp_path / "c.sqlite"), TURNS)
    assert plain(again) == plain(t["before"])
    toks = [m.additional_kwargs["unsee"]["tokens"] for m in again if isinstance(m, AIMessage)]
    assert toks == [m.additional_kwargs["unsee"]["tokens"] for m in t["before"] if isinstance(m, AIMessage)]


@pytest.mark.tiny
def test_a_call_that_runs_past_its_room_is_refused_and_replays_the_same(tmp_path):
    """recall-tiny never learnt the template's call: under unbounded strings it does not close them.
    Its call stops at the room (open_tokens for each open value) and is an invalid tool call that
    says why; the tool does not run, and a second thread writes the same tokens."""
    msgs = []
    for k in range(2):
        tools = Tools(str)
        llm = UnseeChatModel.from_model("recall-tiny", open_tokens=8)
        msgs.append(run(agent_on(llm, tools.tools, tmp_path / f"{k}.sqlite"), TURNS[:1]))
        assert tools.runs == {"get_weather": 0, "send_email": 0}
    call = msgs[0][1]
    (bad,) = call.invalid_tool_calls
    assert not call.tool_calls and "did not close within" in bad["error"] and "open_tokens" in bad["error"]
    assert plain(msgs[0]) == plain(msgs[1])


@pytest.mark.tiny
@pytest.mark.parametrize("model", ["tiny-llama", "recall-tiny"])
def test_a_call_longer_than_the_old_cap_closes(model, tmp_path):
    """Six string arguments (recall-tiny's bounded at 40 characters, so that it closes them): the
    call's room comes from the schema, and the call, over the old 160 tokens, is whole."""
    contact = create_contact if model == "tiny-llama" else create_contact_bounded
    llm = UnseeChatModel.from_model(model)
    agent = agent_on(llm, [read_only(contact)], tmp_path / "a.sqlite")
    msgs = run(agent, [("u1", "Add Jane Doe, jane@example.com, 555-0100, 12 Elm Street, Springfield.")])
    (call,) = msgs[1].tool_calls
    assert not msgs[1].invalid_tool_calls
    assert conforms(call["args"], schemas([contact])["create_contact"])
    assert isinstance(msgs[2], ToolMessage) and msgs[2].content.startswith("added")
    meta = msgs[1].additional_kwargs["unsee"]
    assert meta["segments"][-1] > OLD_CAP, "the call's arguments took more tokens than the old cap allowed"


def test_a_calls_room_is_its_schemas_bound_where_it_has_one():
    """Bytes bound tokens (each token the grammar allows writes a byte at least): a schema that bounds
    every value gets exactly its longest document; each open value adds open_tokens."""
    bounded = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                                "days": {"type": "integer", "minimum": 1, "maximum": 14}}}
    # {"city": "<10 chars, 4 bytes each>", "days": 14}
    longest = len('{"city": "", "days": }') + 4 * 10 + 2
    assert json_bound(bounded) == (longest, 0)
    assert call_room("weather", bounded, 256) == len('weather", "arguments": ') + longest + len("}\n</tool_call>") + 1
    six = schemas([create_contact])["create_contact"]
    size, opened = json_bound(six)
    assert opened == 6 and call_room("create_contact", six, 256) == call_room("create_contact", six, 0) + 6 * 256
    assert call_room("create_contact", six, 256) > OLD_CAP
    assert json_bound({"type": "object", "properties": {"flag": {"type": "boolean"}, "unit": {"enum": ["c", "f"]}}}) \
        == (len('{"flag": , "unit": }') + 5 + 3, 0)


@pytest.fixture(scope="module")
def chatml():
    from unsee.impl.engine.models import load

    b = load("recall-tiny")
    return b.template, b.model.get_output_embeddings().weight.shape[0]


def walk(grammar, tok, text):
    """The matcher after `text`'s tokens, or None where the grammar refuses one of them."""
    m = grammar.matcher()
    for t in tok.encode(text, add_special_tokens=False):
        if not m.mask()[t]:
            return None
        m.consume(t)
    return m


@pytest.mark.tiny
def test_an_answer_is_prose_that_never_opens_a_call(chatml):
    from unsee.impl.engine.grammar import text_grammar

    tpl, vocab = chatml
    g, tok = text_grammar(tpl, vocab), tpl.tok
    assert g.end == tok.convert_tokens_to_ids("<|im_end|>")
    assert not g.matcher().mask()[g.end], "an answer is not empty"
    m = walk(g, tok, "The weather in Paris is sunny.")
    assert m is not None and m.mask()[g.end], "it may end once it has said something"
    for fragment in ('Sure. <tool_call>\n{"name', "<b>hi</b>", "a</tool_call>", "ok <tool-response>"):
        assert walk(g, tok, fragment) is None, fragment
    assert walk(g, tok, "x") is not None and not walk(g, tok, "x").mask()[tok.convert_tokens_to_ids("<|im_start|>")]


@pytest.mark.tiny
def test_no_four_tokens_of_a_reply_repeat_unless_the_grammar_forces_them(chatml):
    from unsee.impl.engine.grammar import NoRepeat, text_grammar

    tpl, vocab = chatml
    tok = tpl.tok
    g = NoRepeat(text_grammar(tpl, vocab), 4)
    a, b = (tok.encode(t, add_special_tokens=False) for t in (" one two three", " four five"))
    assert len(a) >= 3
    m = g.matcher()
    for t in a + b + a:
        m.consume(t)
    assert not m.mask()[b[0]] and m.mask()[g.end], "the four tokens that ended a ... b[0] may not come again"

    class Forced:  # a grammar that allows one token at a time: 5 6 5 6 5, then the end (9)
        end, name = 9, "forced"

        def matcher(self):
            return self

        def __init__(self):
            self.i = 0

        def mask(self):
            out = torch.zeros(10, dtype=torch.bool)
            out[[5, 6, 5, 6, 5, 9][min(self.i, 5)]] = True
            return out

        def consume(self, t):
            self.i += 1

    m = NoRepeat(Forced(), 2).matcher()
    for t in (5, 6, 5, 6, 5):
        assert m.mask()[t], "a repeat the grammar forces stands"
        m.consume(t)
