"""SmolLM2 calls its tools through `bind_tools`, as a LangGraph user's ReAct agent, and forgets exactly.

The agent is LangGraph's `create_react_agent` with two tools whose arguments are plain `str`
(no maxLength), as its documentation writes them. On SmolLM2-135M-Instruct every call is the chat
template's `<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call><|im_end|>`, its JSON
arguments parse and conform to the tool's schema, an answer after a tool's result is a whole turn
(prose ending at `<|im_end|>`, no tag fragment), a six-argument schema longer than the old
160-token cap closes, and a forget of one turn's source leaves the thread a fresh thread run
without it would be: messages, calls and K/V (torch.equal).
"""

import json

import pytest

pytest.importorskip("langgraph", reason="install the test extras: bash scripts/setup.sh --tests")

from langchain_core.messages import AIMessage, ToolMessage

from tests.integrations.test_tool_calls_chat import (
    OLD_CAP, TURNS, agent_on, conforms, create_contact, forgotten, plain, run, same_kv, schemas,
)
from unsee.impl.engine.grammar import call_room
from unsee.impl.integrations.langgraph import UnseeChatModel, read_only

pytestmark = pytest.mark.slow

CALL = ('<|im_start|>assistant\n<tool_call>\n{"name": "', '}\n</tool_call><|im_end|>')


@pytest.fixture(scope="module")
def thread(tmp_path_factory):
    return forgotten("smollm2", tmp_path_factory.mktemp("smollm2"))


def turns_of(messages) -> list[list]:
    """The messages of each user turn (the user's message first)."""
    out: list[list] = []
    for m in messages:
        if m.type == "human":
            out.append([])
        if out:
            out[-1].append(m)
    return out


def test_each_request_calls_the_right_tool_with_valid_json_and_gets_a_whole_answer(thread):
    tok = thread["llm"].context.template.tok
    want = schemas(thread["tools"].raw)
    turns = turns_of(thread["before"])
    assert [t[0].content for t in turns] == [text for _, text in TURNS]
    for t, expect in zip(turns, ["get_weather", "send_email", "get_weather"]):
        call, result, answer = t[1:]
        assert not call.invalid_tool_calls and [c["name"] for c in call.tool_calls] == [expect]
        text = tok.decode(call.additional_kwargs["unsee"]["tokens"])
        assert text.startswith(CALL[0]) and text.endswith(CALL[1]), text
        parsed = json.loads(text[len(CALL[0]) - len('{"name": "'):-len(CALL[1]) + 1])
        assert parsed == {"name": expect, "arguments": call.tool_calls[0]["args"]}
        assert conforms(parsed["arguments"], want[expect])
        assert isinstance(result, ToolMessage)
        toks = answer.additional_kwargs["unsee"]["tokens"]
        assert toks[-1] == tok.convert_tokens_to_ids("<|im_end|>"), "the answer ended at the model's end of turn"
        assert answer.content.strip() and "<" not in answer.content, answer.content
    assert turns[0][1].tool_calls[0]["args"] == {"city": "Paris"}
    assert turns[1][1].tool_calls[0]["args"]["to"] == "alice@example.com"
    assert turns[2][1].tool_calls[0]["args"] == {"city": "Tokyo"}


def test_forget_of_the_email_turn_equals_a_fresh_thread_without_it(thread):
    t = thread
    assert plain(t["after"]) == plain(t["twin"])
    assert same_kv(t["llm"], t["twin_llm"])
    assert not any("alice" in json.dumps(m.model_dump()) for m in t["after"])
    assert t["tools"].runs == t["runs"] and t["runs"]["send_email"] == 1, "the e-mail was sent once, never again"
    r = getattr(t["receipt"], "receipt", t["receipt"])
    assert r.transitions == r.T - r.tau + 1 == 2
    (entry,) = r.compensation
    assert entry["committed"]["to"] and entry["args"] is None, "the sent e-mail is listed for compensation"


def test_a_six_argument_call_longer_than_the_old_cap_is_whole(tmp_path):
    """The schema's room is over the old 160-token cap (SmolLM2 writes this call in fewer tokens: the
    tiny models' test makes one longer than 160), and the call and the answer after it are whole."""
    llm = UnseeChatModel.from_model("smollm2")
    six = schemas([create_contact])["create_contact"]
    assert call_room("create_contact", six, llm.open_tokens) > OLD_CAP
    agent = agent_on(llm, [read_only(create_contact)], tmp_path / "contact.sqlite")
    msgs = run(agent, [("u1", "Save a new contact: Jane Doe, email jane@example.com, phone 555-0100, "
                              "address 12 Elm Street, Springfield.")])
    call = msgs[1]
    assert isinstance(call, AIMessage) and not call.invalid_tool_calls
    (c,) = call.tool_calls
    assert c["name"] == "create_contact" and conforms(c["args"], six)
    tok = llm.context.template.tok
    assert tok.decode(call.additional_kwargs["unsee"]["tokens"]).endswith(CALL[1])
    assert c["args"]["email"] == "jane@example.com"
    assert msgs[3].additional_kwargs["unsee"]["tokens"][-1] == tok.convert_tokens_to_ids("<|im_end|>")
