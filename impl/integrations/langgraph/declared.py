"""Another chat model, declared deterministic: `deterministic(model)`, and which replies a forget can replay.

`deterministic(model)` declares a LangChain chat model deterministic: a forget then replays it
without checking it, and its receipt says the exactness was declared, not checked. It refuses,
with why, a model it knows cannot be: a client of a hosted model, or one set to sample.
`exactness(messages)` says whether a thread's replies all came from `UnseeChatModel` ("checked")
or some from a declared model ("declared"), and refuses any other.
"""

from __future__ import annotations

import hashlib
import json
from typing import Sequence

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import ConfigDict

from unsee.impl.integrations.langgraph.chat import EXACTNESS, UnseeChatModel
from unsee.model.errors import UnseeError


class DeclaredDeterministic(BaseChatModel):
    """Another chat model, declared deterministic by its user (see `deterministic`).

    Its replies get ids that are functions of what it was given (the messages and the bound
    tools) and of what it wrote, and so do its tool calls' ids, so a replay's messages carry the
    ids a fresh thread's do (LangChain would draw `lc_run--…` ids, and a model may draw call ids)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: BaseChatModel

    @property
    def _llm_type(self) -> str:
        return f"declared-deterministic-{self.inner._llm_type}"

    def bind_tools(self, tools, **kw):
        """The inner model's `bind_tools`, declared: a binding of the model (its kwargs are bound
        here), a new model (declared in turn), or the model itself (a model that decides its calls
        without a schema: returned declared, as it is)."""
        from langchain_core.runnables import RunnableBinding

        bound = self.inner.bind_tools(tools, **kw)
        if bound is self.inner:
            return self
        if isinstance(bound, RunnableBinding) and bound.bound is self.inner:
            return self.bind(**bound.kwargs)
        if isinstance(bound, RunnableBinding) and isinstance(bound.bound, BaseChatModel):
            return deterministic(bound.bound).bind(**bound.kwargs)
        if isinstance(bound, BaseChatModel):
            return deterministic(bound)
        raise UnseeError(f"{type(self.inner).__name__}.bind_tools returned a {type(bound).__name__}, not the model or "
                         "a binding of a chat model; wrap the bound model instead: deterministic(model.bind_tools(tools))")

    def _stamp(self, messages, out: ChatResult, kw) -> ChatResult:
        seen = [[m.type, m.content, getattr(m, "tool_calls", None), getattr(m, "tool_call_id", None)] for m in messages]
        for i, g in enumerate(out.generations):
            m = g.message
            key = hashlib.sha256(json.dumps([seen, kw.get("tools"), kw.get("tool_choice"), i, m.content,
                                             [[c["name"], c["args"]] for c in getattr(m, "tool_calls", [])]],
                                            sort_keys=True, default=repr).encode()).hexdigest()[:16]
            update = {"id": f"ai-{key}", "response_metadata": {**m.response_metadata, EXACTNESS: "declared"}}
            if getattr(m, "tool_calls", None):
                update["tool_calls"] = [{**c, "id": f"call-{key}-{k}"} for k, c in enumerate(m.tool_calls)]
            g.message = m.model_copy(update=update)
        return out

    def _generate(self, messages, stop=None, run_manager=None, **kw) -> ChatResult:
        return self._stamp(messages, self.inner._generate(messages, stop=stop, run_manager=run_manager, **kw), kw)

    async def _agenerate(self, messages, stop=None, run_manager=None, **kw) -> ChatResult:
        out = await self.inner._agenerate(messages, stop=stop, run_manager=run_manager, **kw)
        return self._stamp(messages, out, kw)


# Chat models whose replies come from a server: unsee cannot see or fix what the server does (batching,
# model versions, its own sampling), so their replies are not a function of the messages.
REMOTE_MODULES = ("langchain_openai", "langchain_anthropic", "langchain_google_genai", "langchain_google_vertexai",
                  "langchain_mistralai", "langchain_groq", "langchain_fireworks", "langchain_together",
                  "langchain_cohere", "langchain_aws", "langchain_deepseek", "langchain_xai", "langchain_perplexity",
                  "langchain_ollama", "langchain_nvidia_ai_endpoints", "langchain_ibm", "langchain_ai21")
REMOTE_FIELDS = ("base_url", "openai_api_base", "anthropic_api_url", "api_base", "endpoint_url", "host")  # and *api_key
SAMPLING = ("temperature", "top_p", "do_sample", "n")  # settings that make a model sample, on it or in model_kwargs


def _why_not_exact(model: BaseChatModel) -> str | None:
    """Why `deterministic` refuses a model (None: it does not)."""
    name = f"{type(model).__module__}.{type(model).__name__}"
    for cls in type(model).__mro__:
        if any(cls.__module__ == m or cls.__module__.startswith(m + ".") for m in REMOTE_MODULES):
            return (f"{name} is a client of a hosted model ({cls.__module__}): the server decides its replies "
                    "(batching, model versions, its own sampling), so the same messages need not give the same reply")
    for f in [f for f in type(model).model_fields if f.endswith("api_key")] + list(REMOTE_FIELDS):
        if getattr(model, f, None):
            return (f"{name} has {f} set, so its replies come from a server: the same messages need not give the "
                    "same reply")
    settings = {**(getattr(model, "model_kwargs", None) or {}),
                **{k: getattr(model, k) for k in SAMPLING if getattr(model, k, None) is not None}}
    t, p, sample, n = (settings.get(k) for k in SAMPLING)
    greedy = t == 0 or sample is False  # top_p does not matter once the model picks the likeliest token
    why = (f"temperature={t!r}" if t is not None and t > 0 else f"do_sample={sample!r}" if sample else
           f"n={n!r}" if n is not None and n > 1 else
           f"top_p={p!r}" if p is not None and p < 1 and not greedy else None)
    if why is not None:
        return f"{name} samples ({why}): the same messages need not give the same reply"
    return None


def deterministic(model: BaseChatModel) -> DeclaredDeterministic:
    """Declare `model` deterministic (the same messages always give the same reply): a forget
    replays it unchecked and its receipt says `exactness="declared"`.

    Refused, with why, where the model cannot be: a client of a hosted model (its class from a
    provider package such as langchain_openai or langchain_anthropic, or an API key, `base_url` or
    host set on it), or one set to sample (temperature > 0, do_sample=True, n > 1, or top_p < 1
    unless temperature=0 or do_sample=False; on the model or in its model_kwargs). Use UnseeChatModel for those; set temperature=0 on a local one."""
    if isinstance(model, (UnseeChatModel, DeclaredDeterministic)):
        return model
    if not isinstance(model, BaseChatModel):
        raise UnseeError(f"{model!r} is not a LangChain chat model (BaseChatModel)")
    why = _why_not_exact(model)
    if why is not None:
        raise UnseeError(f"deterministic() refuses this model: {why}. A forget would replay it and call the "
                         "result exact; run the agent on UnseeChatModel, or a local model set to decode greedily")
    return DeclaredDeterministic(inner=model)


def exactness(messages: Sequence[BaseMessage], inputs=frozenset()) -> str:
    """"checked" if every model reply came from UnseeChatModel, "declared" if some came from a
    declared model; a reply from any other model is refused with what to do. `inputs`: the ids of
    messages that came in as a turn's input (an AIMessage given as history is not a reply)."""
    out = "checked"
    for m in messages:
        if isinstance(m, AIMessage) and m.id not in inputs:
            e = m.response_metadata.get(EXACTNESS)
            if e is None:
                raise UnseeError(f"message {m.id!r} was written by a chat model a forget cannot replay exactly; "
                                 "use UnseeChatModel, or declare the model with deterministic(model)")
            if e == "declared":
                out = "declared"
    return out
