"""Tool calls carry JSON arguments decoded under the tool's schema, and stay exact.

The mask is part of the choice: a constrained reply is the fixed point of the masked choices, so
a draft is checked by walking a matcher along it, and a wrong draft (even one with tokens the
grammar forbids) gives exactly the reply decoding gives.
"""

from __future__ import annotations

import json
import random
import sqlite3

import pytest
import torch
from hypothesis import given, settings, strategies as st

from unsee.impl.store.episode import EpisodeError, parse_episode
from unsee.model import Config, Observation, Part, counterfactual_stream, layer_digests, run, selective_replay
from unsee.model.grammar import JsonSchema, SchemaError, conforms
from unsee.impl.engine.reference import REFERENCE_ENGINE
from unsee.model.lm import END, REFERENCE, extend
from unsee.model.tools import SHIP_GIFT, Tool

pytestmark = pytest.mark.tiny

# --- the automaton ---------------------------------------------------------------------------

leaf = st.one_of(
    st.builds(lambda lo, n: {"type": "string", "minLength": lo, "maxLength": lo + n}, st.integers(0, 3), st.integers(0, 8)),
    st.builds(lambda lo, n: {"type": "integer", "minimum": lo, "maximum": lo + n}, st.integers(-120, 120), st.integers(0, 300)),
    st.just({"type": "boolean"}),
    st.lists(st.one_of(st.text("ab1", min_size=1, max_size=3), st.integers(0, 12)), min_size=1, max_size=4,
             unique=True).map(lambda v: {"enum": v}),
)
names = st.text("abcxyz_", min_size=1, max_size=5)
schemas = st.recursive(leaf, lambda inner: st.dictionaries(names, inner, min_size=1, max_size=3).map(
    lambda p: {"type": "object", "properties": p}), max_leaves=6).filter(lambda s: s.get("type") == "object")


@given(schemas, st.randoms(use_true_random=False))
@settings(max_examples=150)
def test_every_walk_through_the_automaton_is_a_conforming_document(schema, rng):
    m = JsonSchema(schema).matcher()
    while not m.complete():
        allowed = sorted(m.allowed())
        assert allowed, f"stuck after {m.text!r}"
        m.consume(rng.choice(allowed))
    assert conforms(json.loads(m.text), schema), m.text
    assert JsonSchema(schema).validate(m.text) is not None


@pytest.mark.parametrize("text", ['{"key":4,"value":"a"}', '{"key":1}', '{"key":1,"value":"a","x":1}',
                                  '{"key":"1","value":"a"}', '{"key":1,"value":"' + "a" * 25 + '"}', "not json"])
def test_arguments_outside_the_schema_are_refused(text):
    send = Config().tool("send")
    assert send.arguments.validate(text) is None
    assert send.arguments.validate('{"key": 1, "value": "a"}') == {"key": 1, "value": "a"}  # spacing is free


@pytest.mark.parametrize("schema, field", [({"type": "array"}, "object"), ({"type": "object", "properties": {"a": {"type": "number"}}}, "arguments.a"),
                                           ({"type": "object", "properties": {}}, "at least one property")])
def test_schemas_outside_the_subset_are_refused_by_name(schema, field):
    with pytest.raises(SchemaError, match=field.replace(".", r"\.")):
        Tool.of("t", schema)


# --- the reference: drafts (its engine's) and masks -----------------------------------------------

def _constrained(kv, hint, draws=None):
    return REFERENCE_ENGINE.decode(kv, 64, draws, hint, constraint=SHIP_GIFT.arguments)


@given(st.integers(0, 10**6), st.integers(0, 60), st.integers(0, 255), st.booleans())
@settings(max_examples=200)
def test_a_wrong_draft_gives_exactly_the_decoded_reply_from_its_first_wrong_token(seed, k, byte, sampled):
    kv = extend((), (seed, 7, 11))
    draws = [random.Random(seed).randrange(1 << 30) for _ in range(64)] if sampled else None
    want, kv_want, decoded, verified = _constrained(kv, None, draws)
    assert (decoded, verified) == (len(want), 0) and want[-1] == END
    assert SHIP_GIFT.arguments.validate(REFERENCE.json_text(want)) is not None
    same = _constrained(kv, want, draws)
    assert same == (want, kv_want, 0, len(want))  # F's own reply as the draft: checked, nothing decoded
    k = k % len(want)
    if byte == want[k]:
        byte = (byte + 1) % 256  # a token the grammar may well forbid here: the check must see the mask
    wrong = want[:k] + (byte,) + want[k + 1:]
    got, kv_got, decoded, verified = _constrained(kv, wrong, draws)
    assert (got, kv_got) == (want, kv_want)
    assert (decoded, verified) == (len(want) - k, k)


def test_the_mask_is_part_of_the_choice():
    """Unconstrained, the reference picks tokens outside any JSON document; under the mask never."""
    kv = extend((), (1, 2, 3))
    free, _ = REFERENCE.decode(kv, 12, None)
    assert any(t >= 256 for t in free)
    out = _constrained(kv, None)[0]
    assert all(t < 256 for t in out[:-1]) and out[-1] == END


def test_compensation_shows_the_decoded_json_arguments():
    obs = [Observation("system", (Part("s", "agent"),)), Observation("memory", (Part("z", "address 1 elm"),)),
           Observation("user", (Part("u", "ship it"),), reply=2, tool="ship_gift"),
           Observation("user", (Part("v", "ok"),), reply=2)]
    s = run(obs, Config(tools=(SHIP_GIFT,)))
    (entry,) = s.world
    assert set(json.loads(entry.args)) == {"address"}
    new, receipt = selective_replay(s, ["z"])
    (comp,) = receipt.compensation
    assert comp["committed"] == json.loads(entry.args) and set(comp["args"]) == {"address"}
    twin = run(counterfactual_stream(obs, ["z"]), Config(tools=(SHIP_GIFT,)))
    assert layer_digests(new.state) == layer_digests(twin.state)


# --- the real engine: tiny words (bytes) and a real tokenizer (llguidance) ------------------------

@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "recall-tiny"])
@pytest.mark.parametrize("sampled", [False, True])
def test_constrained_replies_are_fixed_points_on_the_engine(name, sampled):
    """A constrained reply decoded from scratch, checked from its own draft, and recovered from a
    draft wrong at k: same tokens, same K/V (torch.equal), decoding only from k (the engine's event
    log agrees with the counts: the trace check of `unsee forget` runs on the CLI tests)."""
    from unsee.impl.engine.lm import TorchLM
    from unsee.impl.engine.models import load

    lm = TorchLM(load(name))
    tool = SHIP_GIFT
    draws = [random.Random(3).randrange(1 << 30) for _ in range(64)] if sampled else None

    def call(hint):
        kv = lm.empty()
        kv = lm.prefill(kv, lm.encode("user", "Please ship it to 5 Elm Street, Oslo."))
        kv = lm.prefill(kv, lm.header("plan", tool.name), logits=True)
        out, kv, decoded, verified = lm.decode(kv, 64, draws, hint, constraint=lm.grammar(tool))
        return out, [(k.clone(), v.clone()) for k, v in lm.engine.kv_tensors()], decoded, verified

    want, kv_want, decoded, verified = call(None)
    assert decoded == len(want) - 1  # the first token comes from the header's row, each later one from a forward
    assert verified == len(want)  # and the reply's one prefill, whose rows agree with every choice
    assert tool.arguments.validate(lm.json_text(want)) is not None, lm.json_text(want)
    for hint, k in [(want, len(want)), (want[:1] + (want[0],) + want[2:], 1), ((want[0] + 1,) + want[1:], 0)]:
        got, kv_got, decoded, verified = call(hint)
        assert got == want
        assert all(torch.equal(a, b) for x, y in zip(kv_got, kv_want) for a, b in zip(x, y))
        assert decoded == max(len(want) - k - 1, 0)  # decoding resumes at k; the last token needs no forward
        assert verified == len(want) * (1 if k == len(want) else 2)  # the draft's prefill, then the fixed point's


def test_the_grammar_tokenizer_is_the_one_llguidance_builds():
    """The grammar's tokenizer is built from the tokenizer's JSON without the copy that
    `llguidance.hf.from_tokenizer` makes (only to switch padding and truncation off, off here):
    same JSON, same tokens, same masks along a call's arguments."""
    from copy import copy

    import llguidance
    import llguidance.hf

    from unsee.impl.engine.grammar import LLGrammar, _lltokenizer, end_token
    from unsee.impl.engine.models import load

    b = load("recall-tiny")
    tok, vocab, end = b.template.tok, b.model.config.vocab_size, end_token(b.template)
    ours = _lltokenizer(tok, vocab, end)
    theirs = llguidance.hf.from_tokenizer(tok, n_vocab=vocab, eos_token=end)
    backend = copy(tok.backend_tokenizer)
    backend.no_padding()
    backend.no_truncation()
    assert backend.to_str() == tok.backend_tokenizer.to_str()
    assert (ours.vocab_size, ours.eos_token) == (theirs.vocab_size, theirs.eos_token)
    text = '{"address":"5 Elm Street, Oslo"}'  # the grammar's own spacing
    assert ours.tokenize_str(text) == theirs.tokenize_str(text)
    source = LLGrammar(SHIP_GIFT, tok, vocab, end).source  # the call's grammar, as the engine builds it
    a, c = llguidance.LLMatcher(ours, source), llguidance.LLMatcher(theirs, source)
    for t in ours.tokenize_str(text):
        assert a.compute_bitmask() == c.compute_bitmask()
        assert a.consume_token(t) and c.consume_token(t)
    assert a.compute_bitmask() == c.compute_bitmask()


# --- episodes and stores ---------------------------------------------------------------------

def test_an_episode_declares_tools_and_bad_declarations_name_the_line(tmp_path):
    ep = tmp_path / "e.jsonl"
    ep.write_text(json.dumps({"tools": [SHIP_GIFT.to_json()]}) + "\n"
                  + json.dumps({"kind": "user", "source": "u", "text": "ship it", "tool": "ship_gift"}) + "\n")
    obs, tools = parse_episode(ep)
    assert tools == (SHIP_GIFT,) and obs[0].tool == "ship_gift"
    for line, msg in [({"tools": [{"name": "x y", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}]},
                       "line 1: tool 'x y'"),
                      ({"tools": [{"name": "send", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}]},
                       "built in"),
                      ({"tools": [{"name": "t", "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}]},
                       "not supported")]:
        ep.write_text(json.dumps(line) + "\n" + json.dumps({"kind": "user", "source": "u", "text": "x"}) + "\n")
        with pytest.raises(EpisodeError, match=msg):
            parse_episode(ep)
    ep.write_text(json.dumps({"kind": "user", "source": "u", "text": "x", "tool": "ship_gift"}) + "\n")
    with pytest.raises(EpisodeError, match="line 1: tool must be one of"):
        parse_episode(ep)


def test_a_store_of_an_older_format_is_refused_with_the_command_to_re_run(tmp_path):
    from unsee.impl.store.sqlite import Store, StoreError

    from unsee.impl.store.agent import Agent

    db = tmp_path / "old.db"  # a store is published at its path by its first save
    Agent.create(db, model="reference", observations=[Observation("system", (Part("s", "You help."),))]).close()
    with sqlite3.connect(db) as c:
        c.execute("UPDATE meta SET value = '3' WHERE key = 'format'")
    with pytest.raises(StoreError, match="format 3.*unsee run EPISODE"):
        Store(db)
