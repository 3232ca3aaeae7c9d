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

    def unwrap(self, kind: str, ids) -> str:
        """The text of a `block(kind, text)` (its markers and prefix dropped); other ids detokenized whole."""
        text = self.detokenize(ids)
        head, tail = f"<|im_start|>{ROLES[kind]}\n{PREFIX.get(kind, '')}", "<|im_end|>\n"
        if text.startswith(head) and text.endswith(tail) and len(text) >= len(head) + len(tail):
            return text[len(head):-len(tail)]
        return text

    def encode_raw(self, text: str):
        return self._ids(text)
