"""Chat models a forget can replay: `UnseeChatModel` on the KV engine, or a declared one.

`UnseeChatModel` is a LangChain chat model whose θ is a transformers model on unsee's KV
engine. Its cache is the canonical cache of the message list it was last called on (one
prefill per message, a model turn's segments one prefill each), so a thread's K/V after a call
is a function of the messages alone. Replies are greedy, or sampled with draws seeded by the
context, so a replay writes what a fresh thread writes.

Bound with `bind_tools(tools)` (LangChain tools, functions or JSON schemas: names, descriptions
and argument schemas through `convert_to_openai_tool`), the tool list is a system block in
front of the conversation, and after a user's message (kind "user") the model writes one tool
call. With a model's own tokenizer the call is its ChatML template's,
`<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call><|im_end|>`: after the prefilled
opening one reply under one grammar (`unsee.impl.engine.grammar.call_grammar`: a bound tool's
name, its JSON arguments under its schema, the closing tag, the end of turn), a fixed point like
any reply. The tiny word-level models choose the name token by token, then the arguments under
the byte grammar. After a tool's result it answers in text, so a ReAct loop ends;
`tool_choice="none"` answers at once. docs/langgraph.md says how long a call and an answer may be.

Another chat model is declared deterministic with `deterministic(model)` (`declared`).
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any, Sequence

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict

from unsee.impl.integrations.langgraph.tools import REPLAY
from unsee.model.lm import draws as seeded_draws
from unsee.model.errors import UnseeError

EXACTNESS = "unsee_exactness"  # response_metadata key: "checked" (UnseeChatModel) or "declared"
SALT = {"reply": 0, "plan": 1, "arguments": 2}
SOURCE, KIND, HIDDEN = "unsee_source", "unsee_kind", "unsee_hidden"  # input message stamps (additional_kwargs)
MAX_TOKENS = 256  # a text answer's cap under a ChatML template (see UnseeChatModel)
NO_REPEAT = 4  # under a ChatML template no 4 tokens of a reply repeat (see UnseeChatModel)
OPEN_TOKENS = 256  # the tokens a call's argument may take where its schema sets no bound (see UnseeChatModel)


def kind_of(m: BaseMessage) -> str:
    """The template role a message is rendered in: system, user, memory or tool."""
    k = m.additional_kwargs.get(KIND)
    if k:
        return k
    if isinstance(m, SystemMessage):
        return "system"
    if isinstance(m, ToolMessage):
        return "tool"
    return "user"


def _text(m: BaseMessage) -> str:
    """A message's text: its content, or the text of its content blocks where every block is text
    (`[{"type": "text", "text": ...}]`, as LangChain writes multimodal content); a block of any
    other kind is refused: the model reads text only."""
    if isinstance(m.content, str):
        return m.content
    parts = []
    for b in m.content:
        if isinstance(b, str):
            parts.append(b)
        elif isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str):
            parts.append(b["text"])
        else:
            kind = b.get("type") if isinstance(b, dict) else type(b).__name__
            raise UnseeError(f"a {type(m).__name__} holds a content block of type {kind!r}; UnseeChatModel reads "
                             "text only: give it the text (a str, or text blocks)")
    return "".join(parts)


class KVContext:
    """One cache on a KVEngine: the canonical cache of the units it was synced to.

    A unit is a message's tokens and its segments (the lengths of its prefills, in order).
    `chain` names the units resident after BOS (a running hash per unit). `sync` keeps the
    longest resident prefix (a crop: dropped rows are zeroed) and prefills the rest on the
    canonical schedule, so the cache never depends on the path that led to a message list."""

    def __init__(self, bundle, threads: int = 1) -> None:
        from unsee.impl.engine.attention import gqa_kernel
        from unsee.impl.engine.kv import KVEngine
        from unsee.impl.engine.selftest import row_independence

        self.bundle = bundle
        self.template = bundle.template
        self.engine = KVEngine(bundle.model, bundle.device, threads)
        self.engine.kernel = gqa_kernel(self.engine)  # grouped heads read in place, where it gives the same bits
        self.bos = tuple(self.template.bos())
        self.chain: list[tuple[str, int]] = []  # (running key, tokens) per resident unit
        self.exact_rows, _ = row_independence(self.engine)
        self.vocab = bundle.model.get_output_embeddings().weight.shape[0]
        self.generations = 0  # model turns written
        self.lock = threading.RLock()  # one call at a time on the one cache (batch, abatch, threads)

    def reset(self) -> None:
        self.engine.reset()
        self.chain = []

    def ids(self, text: str) -> tuple[int, ...]:
        return tuple(self.template.encode_raw(text))

    def render(self, m: BaseMessage) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """A message's tokens and segments."""
        meta = m.additional_kwargs.get("unsee") or {}
        if isinstance(m, AIMessage):
            if "tokens" in meta:
                return tuple(meta["tokens"]), tuple(meta["segments"])
            head = tuple(self.template.header("reply"))
            body = self.ids(_text(m))
            return head + body, (len(head), len(body))
        toks = tuple(self.template.block(kind_of(m), _text(m)))
        return toks, (len(toks),)

    @staticmethod
    def _key(prev: str, toks, segments) -> str:
        return hashlib.sha256(f"{prev}|{segments}|{','.join(map(str, toks))}".encode()).hexdigest()[:24]

    def sync(self, units: Sequence[tuple[tuple[int, ...], tuple[int, ...]]]) -> str:
        """Make the cache the canonical cache of `units`; returns the running key of the last."""
        e = self.engine
        if len(e) == 0:
            e.prefill(self.bos)
            self.chain = []
        prev, keys = "", []
        for toks, seg in units:
            prev = self._key(prev, toks, seg)
            keys.append(prev)
        keep = 0
        while keep < min(len(keys), len(self.chain)) and self.chain[keep][0] == keys[keep]:
            keep += 1
        if keep < len(self.chain):
            e.crop(len(self.bos) + sum(n for _, n in self.chain[:keep]))
        self.chain = self.chain[:keep]
        for key, (toks, seg) in zip(keys[keep:], units[keep:]):
            at = 0
            for n in seg:
                e.prefill(toks[at:at + n])
                at += n
            self.chain.append((key, len(toks)))
        return prev

    def push(self, toks, segments) -> str:
        """Record a unit the engine just computed (the cache already holds it)."""
        prev = self.chain[-1][0] if self.chain else ""
        key = self._key(prev, tuple(toks), tuple(segments))
        self.chain.append((key, len(toks)))
        return key

    def kv(self) -> list:
        return self.engine.kv_tensors()

    def digest(self) -> str:
        from unsee.impl.engine.kv import tensor_digest

        return tensor_digest(t for pair in self.engine.kv_tensors() for t in pair)


def reply_text(template, ids) -> str:
    """A reply's text, a function of its ids alone. The tiny models' word-level template names an id
    by the word that produced it anywhere in the process, so its text would depend on what else
    ran; there the text is the ids (w<id>)."""
    if getattr(template, "tok", None) is not None:
        return template.detokenize(ids)
    return " ".join(f"w{i}" for i in ids)


def openai_tools(tools) -> list[dict]:
    """Each bound tool as an OpenAI tool spec: {"type": "function", "function": {name, description, parameters}}."""
    out = []
    for t in tools:
        spec = convert_to_openai_tool(t)
        if spec.get("type") != "function":
            raise UnseeError(f"{t!r} is not a function tool; UnseeChatModel binds function tools only")
        out.append(spec)
    names = [s["function"]["name"] for s in out]
    if len(set(names)) != len(names):
        raise UnseeError(f"two bound tools share a name: {names}")
    return out


class UnseeChatModel(BaseChatModel):
    """A LangChain chat model whose θ is a transformers model on unsee's KV engine (see the module).

    With a model's own tokenizer (SmolLM2, a local folder) a turn follows its ChatML template: a
    call is `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call><|im_end|>`, the JSON under
    the tool's schema, and a text answer ends at the model's `<|im_end|>`, or after `max_tokens`
    (default 256) tokens. A call closes within the room its schema leaves (`grammar.call_room`):
    the bytes of its longest document where the schema bounds every value, plus `open_tokens`
    for each value it leaves open (a string with no maxLength); a call that reaches its room is
    an invalid tool call that says so. No `no_repeat` tokens of a reply repeat (a mask, like
    transformers' no_repeat_ngram_size; 0: off). The tiny word-level models write replies of
    exactly `max_tokens` (default 8) tokens and calls under their byte grammar, which close within
    the schema's longest document. Greedy by default; `sampling=True` draws from the context
    with `seed`. Every rule is a function of the tokens before, so a reply is a fixed point."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    context: Any
    sampling: bool = False
    seed: int = 0
    max_tokens: int | None = None
    open_tokens: int = OPEN_TOKENS
    no_repeat: int = NO_REPEAT

    @classmethod
    def from_model(cls, name: str = "tiny-llama", dtype: str = "float32", device: str | None = None,
                   threads: int = 1, **kw) -> "UnseeChatModel":
        """tiny-llama | tiny-qwen2 | tiny-mistral | smollm2 | a local folder or .gguf file."""
        from unsee.impl.engine.models import load

        return cls(context=KVContext(load(name, dtype=dtype, device=device), threads), **kw)

    @property
    def _llm_type(self) -> str:
        return "unsee-kv"

    @property
    def _chat(self) -> bool:
        """The model has its own tokenizer and ChatML template (the tiny models: a word vocabulary)."""
        return getattr(self.context.template, "tok", None) is not None

    def bind_tools(self, tools, *, tool_choice: str | None = None, **kw):
        specs = openai_tools(tools)
        names = [s["function"]["name"] for s in specs]
        if tool_choice not in (None, "auto", "any", "required", "none") and tool_choice not in names:
            raise UnseeError(f"tool_choice {tool_choice!r} is not one of the bound tools {names}")
        self._tools(specs)  # refuse a schema outside the decodable subset now, not at the first call
        if self._chat:
            from unsee.impl.engine.grammar import call_grammar

            call_grammar(self.context.template, _schemas(specs), self.context.vocab)  # and one llguidance refuses
        return self.bind(tools=specs, tool_choice=tool_choice, **kw)

    def _tools(self, specs) -> list:
        from unsee.model.tools import Tool

        return [Tool.of(s["function"]["name"], s["function"].get("parameters") or {"type": "object"},
                        description=s["function"].get("description", "")) for s in specs]

    def tools_block(self, specs) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The tool list as the system block the chat template puts in front of a conversation."""
        tpl = self.context.template
        if self._chat:  # SmolLM2's template has no tools section (apply_chat_template drops `tools=`): the
            # Hermes/Qwen ChatML form, each spec one JSON line in the order its function declares its arguments
            toks = tuple(tpl.tools_block("\n".join(json.dumps(s) for s in specs)))
        else:  # the tiny models' word-level ChatML: each tool's name, description, arguments and their types
            toks = tuple(tpl.block("system", "tools: " + " ; ".join(
                " ".join([s["function"]["name"], s["function"].get("description", ""), "arguments"] +
                         [f"{k} {v.get('type', 'enum')}" for k, v in
                          (s["function"].get("parameters") or {}).get("properties", {}).items()])
                for s in specs)))
        return toks, (len(toks),)

    def units(self, messages, specs=()) -> list:
        """The units (tokens, segments) of the tool block and the messages: the cache `_generate`
        syncs to. Under a ChatML template the unit after a model turn opens with what its tokens lack
        of `<|im_end|>\n` (a reply cut at max_tokens has no `<|im_end|>`), as the template renders a
        conversation."""
        ctx, tpl = self.context, self.context.template
        out = [self.tools_block(specs)] if specs else []
        before = None
        for m in messages:
            toks, seg = ctx.render(m)
            if self._chat and before is not None:
                close = tuple(tpl.end_of_turn())
                close = close[1:] if before[-1:] == close[:1] else close
                toks, seg = close + toks, (len(close) + seg[0],) + tuple(seg[1:])
            out.append((toks, seg))
            before = toks if isinstance(m, AIMessage) else None
        return out

    def _draws(self, key: str, purpose: str, n: int):
        return seeded_draws(self.seed, int(key[:8], 16), SALT[purpose], n) if self.sampling else None

    def _generate(self, messages, stop=None, run_manager=None, **kw) -> ChatResult:
        with self.context.lock:
            return self._write(messages, **kw)

    async def _agenerate(self, messages, stop=None, run_manager=None, **kw) -> ChatResult:
        """The same reply as `_generate`, computed in the event loop's thread (the forwards are CPU or
        GPU work the loop would wait for anyway; calls of an `abatch` take the cache in turn)."""
        with self.context.lock:
            return self._write(messages, **kw)

    def _write(self, messages, **kw) -> ChatResult:
        ctx = self.context
        specs = kw.get("tools") or []
        choice = kw.get("tool_choice")
        key = ctx.sync(self.units(messages, specs))
        # a call answers a user's message; after a tool's result (or a system block) the model answers in text
        calling = bool(specs) and choice != "none" and bool(messages) and isinstance(messages[-1], HumanMessage) \
            and kind_of(messages[-1]) == "user"
        if calling:
            msg = self._call(specs, choice, key)
        else:
            msg = self._reply(key, kw.get("max_tokens") or self.max_tokens or (MAX_TOKENS if self._chat else 8))
        ctx.generations += 1
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def _reply(self, key: str, n: int) -> AIMessage:
        """A text answer: under a ChatML template it ends at `<|im_end|>` or after n tokens (the
        grammar `text_grammar`: no special token, no tool-call tag); the tiny models write n tokens."""
        ctx = self.context
        n = int(n)
        if n < 1:
            raise UnseeError("a model turn writes at least one token")
        head = tuple(ctx.template.header("reply"))
        ctx.engine.prefill(head)
        replay = REPLAY.get()
        draft = replay.draft("reply") if replay is not None else None
        if self._chat:
            from unsee.impl.engine.grammar import NoRepeat, text_grammar

            g = NoRepeat(text_grammar(ctx.template, ctx.vocab), self.no_repeat)
            reply, decoded, _ = ctx.engine.fixed_point_under(n, self._draws(key, "reply", n), draft, g,
                                                             exact_rows=ctx.exact_rows)
            text = ctx.template.tok.decode([t for t in reply if t != g.end], clean_up_tokenization_spaces=False)
        else:
            reply, decoded, _ = ctx.engine.fixed_point(n, self._draws(key, "reply", n), draft=draft,
                                                       exact_rows=ctx.exact_rows)
            text = reply_text(ctx.template, reply)
        if replay is not None:
            replay.wrote(decoded)
        toks, seg = head + tuple(reply), (len(head), len(reply))
        mid = ctx.push(toks, seg)
        return AIMessage(content=text, id=f"ai-{mid[:16]}",
                         additional_kwargs={"unsee": {"tokens": list(toks), "segments": list(seg)}},
                         response_metadata={EXACTNESS: "checked"})

    def _call(self, specs, choice, key: str) -> AIMessage:
        """One tool call (see the class): under a ChatML template one constrained reply after the
        prefilled `<tool_call>\n{"name": "`; with a tiny model the name by constrained choice, then
        the JSON arguments under the schema."""
        tools = self._tools(specs)
        if choice not in (None, "auto", "any", "required"):
            tools = [t for t in tools if t.name == choice]
            specs = [s for s in specs if s["function"]["name"] == choice]
        if self._chat:
            return self._chat_call(specs, key)
        return self._word_call(tools, key)

    def _chat_call(self, specs, key: str) -> AIMessage:
        from unsee.impl.engine.grammar import NoRepeat, call_grammar, call_room
        from unsee.impl.engine.templates import CALL_ARGUMENTS, CALL_CLOSE, CALL_OPEN

        ctx, e, tpl = self.context, self.context.engine, self.context.template
        schemas = _schemas(specs)
        g = NoRepeat(call_grammar(tpl, schemas, ctx.vocab), self.no_repeat)
        room = max(call_room(name, schema, self.open_tokens) for name, schema in schemas)
        head = tuple(tpl.call_header())
        e.prefill(head)
        replay = REPLAY.get()
        draft = replay.draft("call") if replay is not None else None
        reply, decoded, _ = e.fixed_point_under(room, self._draws(key, "arguments", room), draft, g,
                                                exact_rows=ctx.exact_rows)
        if replay is not None:
            replay.wrote(decoded)
        toks, segs = head + tuple(reply), [len(head), len(reply)]
        mid = ctx.push(toks, segs)
        meta = {"unsee": {"tokens": list(toks), "segments": segs}}
        text = tpl.tok.decode([t for t in reply if t != g.end], clean_up_tokenization_spaces=False)
        call_id = f"call-{mid[:16]}"
        if reply[-1] == g.end:  # the grammar closed: the JSON is a call of a bound tool under its schema
            call = json.loads(CALL_OPEN[CALL_OPEN.index("{"):] + text[:-len(CALL_CLOSE) + 1])
            return AIMessage(content="", id=f"ai-{mid[:16]}", additional_kwargs=meta,
                             response_metadata={EXACTNESS: "checked"},
                             tool_calls=[{"name": call["name"], "args": call["arguments"], "id": call_id,
                                          "type": "tool_call"}])
        name, _, args = text.partition(CALL_ARGUMENTS)
        limit = dict(schemas).get(name)
        why = (f"the call did not close within {room} tokens: {self.open_tokens} (open_tokens) for each "
               "argument its schema leaves unbounded; give the argument a maxLength, or raise open_tokens")
        return AIMessage(content="", id=f"ai-{mid[:16]}", additional_kwargs=meta,
                         response_metadata={EXACTNESS: "checked"},
                         invalid_tool_calls=[{"name": name if limit is not None else None, "args": args, "id": call_id,
                                              "error": why, "type": "invalid_tool_call"}])

    def _word_call(self, tools, key: str) -> AIMessage:
        """A tiny model's call: the name word by constrained choice, then the JSON arguments under
        the byte grammar, which always close within the tool's call_room."""
        import torch

        from unsee.impl.engine.grammar import grammar, json_text

        ctx, e, tpl = self.context, self.context.engine, self.context.template
        head = tuple(tpl.header("plan"))
        spelled = {t.name: (tpl.word(t.name),) for t in tools}
        seqs = list(spelled.values())
        if len(set(seqs)) < len(seqs):
            raise UnseeError(f"the bound tools' names {sorted(spelled)} share a word in this vocabulary; rename one")
        segs = [len(head)]
        e.prefill(head)
        name: tuple[int, ...] = ()
        draws = self._draws(key, "plan", 64)
        while name not in seqs:
            allowed = sorted({s[len(name)] for s in seqs if s[:len(name)] == name})
            mask = torch.zeros(e.logits.shape[-1], dtype=torch.bool)
            mask[allowed] = True
            t = e.choose(e.logits.masked_fill(~mask.to(e.logits.device), float("-inf")),
                         None if draws is None else draws[len(name)])
            e.prefill([t])
            segs.append(1)
            name += (t,)
        tool = next(t for t in tools if spelled[t.name] == name)
        g = grammar(tpl, tool, ctx.vocab)
        room = tool.call_room()
        replay = REPLAY.get()
        draft = replay.draft("call") if replay is not None else None
        reply, decoded, _ = e.fixed_point_under(room, self._draws(key, "arguments", room), draft, g,
                                                exact_rows=ctx.exact_rows)
        if replay is not None:
            replay.wrote(decoded)
        segs.append(len(reply))
        toks = head + name + tuple(reply)
        mid = ctx.push(toks, segs)
        text = json_text(tpl, reply)
        meta = {"unsee": {"tokens": list(toks), "segments": segs}}
        call_id = f"call-{mid[:16]}"
        args = tool.arguments.validate(text)
        if args is None:  # not reached: the byte grammar closes every document within call_room
            return AIMessage(content="", id=f"ai-{mid[:16]}", additional_kwargs=meta,
                             invalid_tool_calls=[{"name": tool.name, "args": text, "id": call_id,
                                                  "error": f"the arguments did not close within {room} tokens",
                                                  "type": "invalid_tool_call"}],
                             response_metadata={EXACTNESS: "checked"})
        return AIMessage(content="", id=f"ai-{mid[:16]}", additional_kwargs=meta, response_metadata={EXACTNESS: "checked"},
                         tool_calls=[{"name": tool.name, "args": args, "id": call_id, "type": "tool_call"}])


def _schemas(specs) -> list[tuple[str, dict]]:
    """(name, argument schema) of each bound tool, properties in the order the function declares them."""
    return [(s["function"]["name"], s["function"].get("parameters") or {"type": "object", "properties": {}})
            for s in specs]


def source_message(text: str, source: str, kind: str = "user") -> BaseMessage:
    """An input message carrying the source id a forget can name (kind: system, user, memory, tool)."""
    cls = SystemMessage if kind in ("system", "memory") else HumanMessage
    kw = {SOURCE: source} | ({KIND: kind} if kind in ("memory", "tool") else {})
    return cls(content=text, additional_kwargs=kw)
