"""How a transcript becomes tokens: ChatML blocks and the assistant turn's headers, rendered
with a chat model's own tokenizer (`ChatMLTemplate`) or, for the random-weight tiny families,
with a word-level vocabulary (`WordTemplate`)."""

from __future__ import annotations

import re
import zlib

ROLES = {"system": "system", "user": "user", "memory": "system", "tool": "user"}
PREFIX = {"memory": "Memory: ", "tool": "Tool result: "}
# What the scaffold prefills before the model writes a tool call or a memory write-back.
HEADERS = {"reply": "", "plan": '<tool_call>\n{{"name": "{tool}", "arguments": ', "summary": "Facts to remember about the user:"}

# A chat model's tool call in the form Hermes- and Qwen-style ChatML templates give it (SmolLM2's own
# template has no tools section), as the LangGraph chat model writes it: the call, the closing tag and
# the end of turn are the model's own turn, `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`.
# A tool's result is the "tool" block (a user turn, "Tool result: …"): SmolLM2-135M answers it in prose,
# where after Qwen's `<tool_response>` tags it went on writing tags of its own. The scaffold's own calls
# (HEADERS["plan"], `unsee run`) keep their form: a store replays its tokens.
CALL_OPEN, CALL_ARGUMENTS, CALL_CLOSE = '<tool_call>\n{"name": "', '", "arguments": ', "}\n</tool_call>"
TOOLS_PROMPT = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{listing}\n"
                "</tools>\n\nFor each function call, return a json object with function name and arguments within "
                "<tool_call></tool_call> XML tags:\n<tool_call>\n"
                '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>')


class WordTemplate:
    """A word-level tokenizer with ChatML-like markers, for random-weight tiny models."""

    SPECIAL = {"bos": 1, "im_start": 2, "im_end": 3, "system": 4, "user": 5, "assistant": 6,
               "plan": 7, "summary": 8}

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab
        self.names = {v: k for k, v in self.SPECIAL.items()}
        self.words: dict[int, str] = {}  # id → the word that produced it, for detokenize

    def word(self, w: str) -> int:
        m = re.fullmatch(r"<\|(\w+)\|>", w)
        if m and m.group(1) in self.SPECIAL:
            return self.SPECIAL[m.group(1)]
        m = re.fullmatch(r"w(\d+)", w)
        if m and int(m.group(1)) < self.vocab:
            return int(m.group(1))
        i = 10 + zlib.crc32(w.encode()) % (self.vocab - 10)
        self.words.setdefault(i, w)
        return i

    def encode_raw(self, text: str):
        return [self.word(w) for w in text.split()]

    def bos(self):
        return [self.SPECIAL["bos"]]

    def block(self, kind: str, text: str):
        s = self.SPECIAL
        return [s["im_start"], s[ROLES[kind]]] + [self.word(w) for w in (PREFIX.get(kind, "") + text).split()] + [s["im_end"]]

    def header(self, purpose: str, tool: str | None = None):
        s = self.SPECIAL
        return [s["im_start"], s["assistant"]] + ([s[purpose]] if purpose in s else []) + \
            ([self.word(tool)] if tool else [])

    def unwrap(self, kind: str, ids) -> str:
        """The text of a `block(kind, text)` (its markers and prefix dropped); other ids detokenized whole."""
        s, ids = self.SPECIAL, list(ids)
        head = [s["im_start"], s[ROLES[kind]]] + [self.word(w) for w in PREFIX.get(kind, "").split()]
        if ids[:len(head)] == head and ids[-1:] == [s["im_end"]] and len(ids) > len(head):
            ids = ids[len(head):-1]
        return self.detokenize(ids)

    def detokenize(self, ids) -> str:
        """Inverse of encode_raw for every id this template produced (others print as w<id>)."""
        return " ".join(f"<|{self.names[i]}|>" if i in self.names else self.words.get(i, f"w{i}") for i in ids)


class ChatMLTemplate:
    """ChatML rendering with the model's own tokenizer (SmolLM2 and other chat models)."""

    def __init__(self, tokenizer) -> None:
        self.tok = tokenizer

    def _ids(self, text: str):
        return self.tok.encode(text, add_special_tokens=False)

    def bos(self):
        bos = self.tok.bos_token_id if self.tok.bos_token_id is not None else self.tok.eos_token_id
        return [bos]

    def block(self, kind: str, text: str):
        return self._ids(f"<|im_start|>{ROLES[kind]}\n{PREFIX.get(kind, '')}{text}<|im_end|>\n")

    def header(self, purpose: str, tool: str | None = None):
        return self._ids(f"<|im_start|>assistant\n{HEADERS.get(purpose, '').format(tool=tool)}")

    def detokenize(self, ids) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=False)

    def end_of_turn(self):
        """What follows a turn's text: `<|im_end|>` and the newline before the next `<|im_start|>`."""
        return self._ids("<|im_end|>\n")

    def call_header(self):
        """The assistant header and the fixed opening of a tool call, up to the tool's name."""
        return self._ids(f"<|im_start|>assistant\n{CALL_OPEN}")

    def default_system(self) -> str:
        """The system message the tokenizer's chat template writes when a conversation has none
        (SmolLM2's: "You are a helpful AI assistant named SmolLM, …"), or ""."""
        try:
            text = self.tok.apply_chat_template([{"role": "user", "content": "\x00"}], tokenize=False)
        except Exception:  # no chat template, or one that wants other messages
            return ""
        head = "<|im_start|>system\n"
        if not isinstance(text, str) or not text.startswith(head) or "<|im_end|>" not in text:
            return ""
        return text[len(head):text.index("<|im_end|>")]

    def tools_block(self, listing: str):
        """The system block listing the tools (one JSON spec a line), in the Hermes/Qwen ChatML form:
        the template's own default system message, then the tools."""
        system = self.default_system()
        return self.block("system", (system + "\n\n" if system else "") + TOOLS_PROMPT.format(listing=listing))

    def unwrap(self, kind: str, ids) -> str:
        """The text of a `block(kind, text)` (its markers and prefix dropped); other ids detokenized whole."""
        text = self.detokenize(ids)
        head, tail = f"<|im_start|>{ROLES[kind]}\n{PREFIX.get(kind, '')}", "<|im_end|>\n"
        if text.startswith(head) and text.endswith(tail) and len(text) >= len(head) + len(tail):
            return text[len(head):-len(tail)]
        return text

    def encode_raw(self, text: str):
        return self._ids(text)
