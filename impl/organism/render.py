"""What the agent writes in the synthetic transcripts, and their rendering through the
runtime's own transition.

`write` gives the text a competent agent would write for an intent and the facts in its
context (answers, summaries, a tool call's canonical JSON arguments). `Scribe` is the `lm`
that `unsee.model.state.step` runs with while rendering an episode of `unsee.impl.organism.data`:
the scaffold prefills every block and header with the chat template, and each time it asks
the model to decode n tokens the Scribe writes the intended text, so a training sequence is
token for token a context the runtime builds. `TextTemplate` is the layout over characters
for the corpus a tokenizer is trained on.
"""

from __future__ import annotations

import json

from unsee.impl.organism.data import ASK_FALLBACK, CALL, KINDS, ROUTES, Episode, Fact, Intent, episode
from unsee.model.grammar import canonical
from unsee.model.state import initial_state, step


def present(facts, text: str) -> list[Fact]:
    """The facts whose evidence is in `text`, in order of first appearance."""
    found = []
    for f in facts:
        pos = [text.find(e) for e in f.evidence() if e in text]
        if pos:
            found.append((min(pos), f))
    return [f for _, f in sorted(found, key=lambda x: x[0])]


def listing(facts) -> str:
    items = [f.item() for f in facts if f.item()]
    return "; ".join(items) + "." if items else "I have no details about you yet."


def find_fact(facts, kind):
    kind_list = [kind] + ([ASK_FALLBACK[kind]] if kind in ASK_FALLBACK else [])
    for k in kind_list:
        for f in facts:
            if f.kind == k:
                return f
    return None


def route(facts, r: str) -> str:
    for kind in ROUTES[r]:
        f = find_fact(facts, kind)
        if f is not None:
            return f.value
    return "unknown"


def arguments(v: str) -> str:
    """The JSON arguments of a call carrying identifier `v`: canonical, under the tool's schema
    (a value longer than the schema allows is cut where the constrained decoder stops it)."""
    (name, prop), = json.loads(CALL.schema)["properties"].items()
    text = canonical({name: v[:prop.get("maxLength", len(v))]})
    if CALL.arguments.validate(text) is None:
        raise ValueError(f"{v!r} cannot be the argument of {CALL.name}: its schema refuses {text}")
    return text


def write(purpose: str, intent: Intent, facts) -> str:
    """The text the agent writes for one decode (before tokenization and cutting to n)."""
    if purpose == "summary":
        items = [f.item() for f in facts if f.item()]
        return " " + ("; ".join(items) + "." if items else "nothing yet.")
    if purpose == "plan":
        return arguments(route(facts, intent.route))
    kind = intent.reply
    if kind == "text":
        return intent.arg
    if kind == "list" or kind == "none" or kind == "ack":
        return listing(facts)
    if kind == "ask":
        if intent.arg == "name":
            f = find_fact(facts, "name")
            return f"Your name is {f.value}." if f else "I do not know your name."
        f = find_fact(facts, intent.arg)
        if f is None:
            ask = KINDS[intent.arg].asks[0].replace("my ", "your ", 1)
            return f"I do not know {ask}."
        return f.k.answer.format(v=f.value)
    if kind == "cue":
        f = find_fact(facts, intent.arg)
        return f"{f.value}." if f else "unknown."
    if kind in ("ship", "pay", "mail"):
        v = route(facts, intent.route)
        verb = {"ship": "Shipping it to", "pay": "Paying to", "mail": "Emailing"}[kind]
        return f"{verb} {v}." if v != "unknown" else "I need the details first."
    if kind == "compare":
        a, b = intent.arg
        never = find_fact(facts, "never")
        if never is not None and never.value in (a, b):
            other = b if never.value == a else a
            return f"{other}, since you never use {never.value}."
        return f"Both {a} and {b} are fine."
    if kind == "choose":
        a, b = intent.arg
        never, pref = find_fact(facts, "never"), find_fact(facts, "preference")
        if never is not None and never.value in (a, b):
            return (b if never.value == a else a) + "."
        if pref is not None and pref.value in (a, b):
            return pref.value + "."
        return a + "."
    raise ValueError(kind)


# --- rendering through the runtime's own transition -----------------------------------------

class Scribe:
    """The `lm` for `step` that writes the intended text: the runtime's scaffold renders everything
    else, so the transcript is token for token the one the runtime builds. Records every
    context the model decodes in, with a loss weight per token."""

    name = "scribe"

    def __init__(self, template, pad_weight: float = 0.25) -> None:
        self.t = template
        self.pad_weight = pad_weight
        self.im_end = template.encode_raw("<|im_end|>")
        self.intent = Intent("none")
        self.facts: list[Fact] = []
        self.purpose = "reply"
        self.ids: list[int] = []
        self.w: list[float] = []
        self.done: list[tuple[list[int], list[float]]] = []
        self.texts: list[str] = []  # everything written, for tokenizer training

    def fit(self, text: str, n: int) -> tuple[list[int], list[float]]:
        ids = list(self.t.encode_raw(text)) + list(self.im_end)
        w = [1.0] * len(ids)
        while len(ids) < n:
            ids += self.im_end
            w += [self.pad_weight] * len(self.im_end)
        return ids[:n], w[:n]

    def call(self, text: str, n: int) -> tuple[list[int], list[float]]:
        """A tool call's JSON arguments as the constrained decoder ends them: the text, then the
        end-of-turn token, no padding; at most n tokens (a longer call is cut, as decoding is)."""
        ids = (list(self.t.encode_raw(text)) + list(self.im_end))[:n]
        return ids, [1.0] * len(ids)

    # the LM interface of unsee.model.lm, as F (unsee.model.state.step) uses it
    def encode(self, kind, text):
        self.texts.append(text)
        return tuple(self.t.block(kind, text))

    def header(self, purpose, tool=None):
        self.purpose = purpose
        return tuple(self.t.header(purpose, tool))

    def grammar(self, tool):
        return tool.arguments

    def json_text(self, tokens):
        return self.t.detokenize([t for t in tokens if t not in self.im_end])

    def empty(self):
        self.flush()
        self.ids, self.w = list(self.t.bos()), [0.0] * len(self.t.bos())
        return 0

    def prefill(self, kv, tokens):
        self.ids += list(tokens)
        self.w += [0.0] * len(tokens)
        return kv + 1

    def decode(self, kv, n, draw_list, constraint=None, head=()):
        self.ids += list(head)
        self.w += [0.0] * len(head)
        if n == 0:
            return (), kv
        facts = present(self.facts, self.t.detokenize(self.ids))
        text = write(self.purpose, self.intent, facts)
        self.texts.append(text)
        ids, w = self.fit(text, n) if constraint is None else self.call(text, n)
        self.ids += ids
        self.w += w
        return tuple(ids), kv + 1

    def rebuild(self, tokens, blocks):
        self.flush()
        self.ids = list(self.t.bos()) + list(tokens)
        self.w = [0.0] * len(self.ids)
        return 0

    def flush(self):
        if self.ids and any(self.w):
            self.done.append((self.ids, self.w))
        self.ids, self.w = [], []

    def crop(self, kv, n):
        return kv

    def resident(self, kv):
        return True

    def kv_length(self, kv):
        return len(self.ids) - len(self.t.bos())

    def select(self, kv, positions):
        raise NotImplementedError("the scribe writes transcripts; nothing edits them in place")

    def kv_digest(self, kv):
        return str(kv)


def render(ep: Episode, template) -> tuple[list[tuple[list[int], list[float]]], list[str]]:
    """(sequences of (token ids, loss weights), texts written) for one episode."""
    s = Scribe(template)
    s.facts = list(ep.facts)
    state = initial_state(ep.config, s)
    for obs, intent in ep.steps:
        s.intent = intent
        state = step(state, obs, model=s)
    s.flush()
    return s.done, s.texts


class TextTemplate:
    """The ChatML layout over characters (one id per character), for collecting the corpus a
    tokenizer is trained on before any tokenizer exists."""

    HEADERS = None

    def __init__(self) -> None:
        from unsee.impl.engine.templates import HEADERS, PREFIX, ROLES

        self.roles, self.prefix, self.headers = ROLES, PREFIX, HEADERS

    def bos(self):
        return [0]

    def encode_raw(self, text):
        return [ord(c) for c in text] if text != "<|im_end|>" else [1]

    def block(self, kind, text):
        return self.encode_raw(f"<|im_start|>{self.roles[kind]}\n{self.prefix.get(kind, '')}{text}") + [1] + [10]

    def header(self, purpose, tool=None):
        return self.encode_raw(f"<|im_start|>assistant\n{self.headers.get(purpose, '').format(tool=tool)}")

    def detokenize(self, ids):
        return "".join(chr(i) if i > 1 else "" for i in ids)


def corpus(n: int, start: int = 0) -> list[str]:
    """Texts of episodes start..start+n-1, as the tokenizer sees them."""
    t = TextTemplate()
    out = []
    for seed in range(start, start + n):
        _, texts = render(episode(seed), t)
        out += texts
    return out
