"""`unsee show`: a stored session decoded turn by turn, and its provenance graph drawn."""

import json
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from unsee.impl.cli import app
from unsee.impl.store.agent import Agent
from unsee.model import Observation, Part

pytestmark = pytest.mark.tiny

runner = CliRunner()
EPISODE = Path(__file__).resolve().parents[2] / "examples" / "address.jsonl"


def test_show_decodes_every_turn_and_marks_what_a_forget_touches(tmp_path):
    db = tmp_path / "s.db"
    assert runner.invoke(app, ["run", str(EPISODE), "--db", str(db), "--model", "tiny-llama"]).exit_code == 0
    res = runner.invoke(app, ["show", "--db", str(db), "--source", "addr", "--graph", str(tmp_path / "g.png"),
                              "--json", str(tmp_path / "v.json")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "v.json").read_text())
    assert [t["t"] for t in doc["turns"]] == list(range(1, 8))
    assert doc["turns"][2]["parts"] == [{"source": "addr", "text": "The user's home address is 42 Wallaby Way, Sydney."}]
    # a memory record reads as the text remembered, without the template's markers. tiny-llama's
    # word vocabulary hashes words to ids and reads an id back as the first word this process gave
    # it ("user's" and "assistant." share one), so only the shape is compared here; the unwrapping
    # itself is compared exactly in test_a_block_reads_back_as_its_text_under_either_template
    (memory,) = [m["text"] for m in doc["turns"][2]["memory"]]
    text = doc["turns"][2]["parts"][0]["text"]
    assert len(memory.split()) == len(text.split()) and "<|" not in memory and not memory.startswith("Memory:")
    assert f"memory {memory}\n" in res.output
    assert any(t["committed"] and t["committed"][0]["tool"] == "send" for t in doc["turns"])
    # t=5 reads back two tool results: the send committed from t=4, and its own lookup
    assert [len(t["results"]) for t in doc["turns"]] == [0, 0, 0, 0, 2, 0, 0]
    assert f"result {doc['turns'][4]['results'][1]}\n" in res.output
    plan = doc["forget_plan"]
    assert (plan["tau"], plan["checkpoint"], plan["transitions"]) == (3, 2, 5)
    assert "t3.1.memory" in plan["taint"] and not any(a.startswith(("t1.", "t2.")) for a in plan["taint"])
    png = (tmp_path / "g.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "[addr] The user's home address" in res.output and "fired send(" in res.output
    lines = res.output.splitlines()  # the listing itself marks the checkpoint, τ and what lies in I(z)
    at = {k: next(i for i, x in enumerate(lines) if k in x) for k in ("checkpoint R_2", "t=2 ", "t=3 ", "t=4 ")}
    assert at["t=2 "] < at["checkpoint R_2"] < at["t=3 "] and "(τ: a forget replays from here)" in lines[at["t=3 "]]
    assert "in I(z): memory, memory_record, block" in lines[at["t=3 "] + 1]
    assert not any("in I(z)" in x for x in lines[:at["t=3 "]])
    assert runner.invoke(app, ["forget", "--db", str(db), "--source", "addr"]).exit_code == 0
    after = runner.invoke(app, ["show", "--db", str(db), "--graph", str(tmp_path / "after.svg"),
                                "--json", str(tmp_path / "after.json")])
    assert after.exit_code == 0 and "receipt: B7 τ=3 T=7 checkpoint 2, 5 transitions" in after.output
    assert "42 Wallaby Way" not in after.output
    assert (tmp_path / "after.svg").read_text().lstrip().startswith("<?xml")
    # what went out stays what went out; the forgotten state records the twin's call, and the
    # view shows both (the send's arguments were decoded from a context that held the address)
    sent = next(i for i, t in enumerate(doc["turns"]) if t["fired"])
    before, now = doc["turns"][sent], json.loads((tmp_path / "after.json").read_text())["turns"][sent]
    assert now["fired"] == before["fired"] == before["committed"]
    assert now["committed"][0]["call_id"] == now["fired"][0]["call_id"] and now["committed"] != now["fired"]
    fired = f"fired send({json.dumps(before['fired'][0]['args'])}) {before['fired'][0]['call_id']}"
    assert fired in after.output and "}) went out; the state after the forget records send(" in after.output
    # the view's compensation is the receipt's: the same entries, at the turn they went out
    receipt = json.loads((tmp_path / "after.json").read_text())["receipts"][-1]
    assert not any(t["compensation"] for t in doc["turns"])
    assert now["compensation"] == receipt["compensation"] and now["compensation"][0]["reason"] == "arguments differ"
    gone = runner.invoke(app, ["show", "--db", str(db), "--source", "addr"])
    assert gone.exit_code == 2 and "'addr' was already forgotten" in gone.output


def test_a_step_returns_what_it_produced(tmp_path):
    agent = Agent.create(tmp_path / "a.db", model="tiny-llama")
    agent.step(Observation("system", (Part("sys", "you are an agent"),)))
    out = agent.step(Observation("user", (Part("u1", "ship it home"),), reply=3, tool="send"))
    assert out["t"] == 2 and out["parts"] == [{"source": "u1", "text": "ship it home"}]
    assert len(out["replies"][0].split()) == 3 and out["pending_calls"][0]["tool"] == "send"
    assert {a["type"] for a in out["artifacts"]} >= {"user", "block", "reply", "plan"}
    out = agent.step(Observation("user", (Part("u2", "thanks"),), reply=2))
    assert out["committed"][0]["tool"] == "send"
    agent.close()


class _Chars:
    """A tokenizer of one id per character, enough to render ChatML."""

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(map(chr, ids))


@pytest.mark.parametrize("kind", ["memory", "tool", "user", "system"])
def test_a_block_reads_back_as_its_text_under_either_template(kind):
    from unsee.impl.engine.templates import ChatMLTemplate, WordTemplate

    text = "ship to 42 Wallaby Way"
    for template in (ChatMLTemplate(_Chars()), WordTemplate(4096)):
        assert template.unwrap(kind, template.block(kind, text)) == text
        assert template.unwrap(kind, template.encode_raw(text)) == text  # no markers: the text whole


def test_the_views_compensation_names_each_kind_of_difference_at_its_turn():
    """Per turn: a call that went out with other arguments, one that went out but the state
    after the forget does not make, and one the state records that never went out."""
    from types import SimpleNamespace

    from unsee.impl.store.show import compensation_at, compensation_text
    from unsee.model.state import LedgerEntry

    fired = (LedgerEntry("call-t2", "send", '{"to":"home"}', 3), LedgerEntry("call-t4", "send", '{"to":"x"}', 5))
    recorded = (LedgerEntry("call-t2", "send", '{"to":"shop"}', 3), LedgerEntry("call-t6", "pay", '{"n":1}', 7))
    s = SimpleNamespace(world=fired, state=SimpleNamespace(ledger=recorded))
    assert compensation_at(s, 3) == [{"call_id": "call-t2", "tool": "send", "args": {"to": "shop"},
                                      "committed": {"to": "home"}, "reason": "arguments differ"}]
    assert compensation_at(s, 5) == [{"call_id": "call-t4", "tool": "send", "args": None, "committed": {"to": "x"},
                                      "reason": "counterfactual makes no such call"}]
    assert compensation_at(s, 7) == [{"call_id": "call-t6", "tool": "pay", "args": {"n": 1}, "committed": None,
                                      "reason": "not committed"}]
    assert compensation_at(s, 4) == []
    texts = [compensation_text(compensation_at(s, t)[0]) for t in (3, 5, 7)]
    assert texts == ['send({"to": "home"}) went out; the state after the forget records send({"to": "shop"}) '
                     'instead, and a replay fires nothing',
                     'send({"to": "x"}) went out; the state after the forget makes no such call',
                     'the state after the forget records pay({"n": 1}), which never went out; a replay fires nothing']


def test_a_call_whose_arguments_would_be_cut_gets_room_or_is_shown_failed(tmp_path):
    """A declared tool whose longest arguments (81 characters) pass the default budget of 64 tokens:
    `run` makes room by itself, so the consequential call is planned and fires; held to 64 tokens it
    warns before running, and `show` marks the call cut and failed (nothing planned, nothing fired)."""
    tools = {"tools": [{"name": "book_visit", "consequential": True, "parameters": {
        "type": "object", "properties": {"doctor": {"type": "string", "maxLength": 24},
                                         "reason": {"type": "string", "maxLength": 32}}}}]}
    lines = [tools, {"kind": "system", "source": "sys", "text": "You book clinic visits."},
             {"kind": "user", "source": "u1", "text": "Book me a visit for my knee.", "reply": 4, "tool": "book_visit"},
             {"kind": "user", "source": "u2", "text": "Thanks.", "reply": 4}]
    episode = tmp_path / "clinic.jsonl"
    episode.write_text("".join(json.dumps(x) + "\n" for x in lines))
    views = {}
    for name, extra in (("roomy", []), ("tight", ["--call-tokens", "64"])):
        db = tmp_path / f"{name}.db"
        res = runner.invoke(app, ["run", str(episode), "--db", str(db), "--model", "tiny-llama", *extra])
        assert res.exit_code == 0, res.output
        warned = "book_visit: its longest arguments take 81 characters" in " ".join(res.output.split())
        assert warned == (name == "tight"), res.output
        shown = runner.invoke(app, ["show", "--db", str(db), "--json", str(tmp_path / f"{name}.json")])
        assert shown.exit_code == 0, shown.output
        views[name] = (json.loads((tmp_path / f"{name}.json").read_text())["turns"][1], shown.output)
    (roomy, out), (tight, cut) = views["roomy"], views["tight"]
    assert "up to 82 tokens of arguments" not in cut
    assert roomy["calls"][0]["valid"] and not roomy["calls"][0]["cut"] and roomy["pending_calls"]
    assert tight["calls"][0] == {**tight["calls"][0], "valid": False, "cut": True, "tokens": 64}
    assert not tight["pending_calls"] and "invalid: cut at 64 tokens" in " ".join(cut.split())
    assert "fired book_visit(" in out and "fired book_visit(" not in cut


def test_the_python_api_warns_of_a_call_that_may_be_cut(tmp_path):
    from unsee.model import Config
    from unsee.model.tools import Tool

    tool = Tool.of("note", {"type": "object", "properties": {"text": {"type": "string", "maxLength": 70}}})
    with pytest.warns(UserWarning, match="tool note: its longest arguments take 81 characters .* Raise call_tokens to 82"):
        Agent.create(tmp_path / "a.db", "reference", Config(tools=(tool,))).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Agent.create(tmp_path / "b.db", "reference", Config(tools=(tool,), call_tokens=82)).close()
