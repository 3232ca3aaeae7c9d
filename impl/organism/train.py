"""Train recall-tiny: a byte-level BPE tokenizer and a small Llama on the transcripts of `data`.

    python -m unsee.impl.organism.train --out DIR [--steps N] [--minutes M]

Deterministic: one process, a fixed number of threads (`--threads`, default one), fixed seeds,
`torch.use_deterministic_algorithms`, episodes drawn by index (step · batch + i), the
learning-rate schedule a function of the step alone. The same command on the same torch build
gives the same weights (another thread count or `--attn` gives other weights); `--minutes` only
stops early (then the result depends on the machine's speed, and the log says so).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from unsee.impl.organism import data as D
from unsee.impl.organism import render as R

SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
VOCAB = 2048
CORPUS_EPISODES = 4000
MAX_LEN = 896
ARCH = dict(hidden_size=192, intermediate_size=512, num_hidden_layers=4, num_attention_heads=6,
            num_key_value_heads=3, max_position_embeddings=2048, rope_theta=10000.0, tie_word_embeddings=True)
EVAL_START = 10_000_000  # held-out episode seeds start here; training draws from 0 up


def build_tokenizer(episodes: int = CORPUS_EPISODES, vocab: int = VOCAB, digits: bool = False):
    """A byte-level BPE (any text encodes; no unknown token) trained on the generator's texts.
    With `digits`, a number is cut into pairs of digits from its first digit on (a lone last
    digit stays one), and every pair is a token: 100 tokens that random numbers use evenly, so
    copying an IBAN is copying ten common tokens (a 20-digit IBAN fits the 16-token tool call),
    not a dozen rare merges. Without it, digits merge like any text."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from unsee.impl.engine.templates import HEADERS, PREFIX, ROLES

    texts = R.corpus(episodes)
    scaffold = [f"<|im_start|>{r}\n{PREFIX.get(k, '')}" for k, r in ROLES.items()] + \
               [f"<|im_start|>assistant\n{h}" for h in HEADERS.values()]
    texts += scaffold * 200
    if digits:  # every pair of digits seen, so every pair becomes a token
        texts += [" ".join(f"{i:02d}" for i in range(100))] * 20
    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    pairs = pre_tokenizers.Split(Regex(r"\d\d?"), behavior="isolated")
    tok.pre_tokenizer = pre_tokenizers.Sequence([pairs, byte_level]) if digits else byte_level
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=list(SPECIAL),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=SPECIAL[0], eos_token=SPECIAL[2],
                                   pad_token=SPECIAL[0], unk_token=None)
    fast.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return fast


def new_model(vocab: int, seed: int = 0, attn: str = "eager"):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, bos_token_id=0, eos_token_id=2, pad_token_id=0, **ARCH)
    cfg._attn_implementation = attn
    return LlamaForCausalLM(cfg)


def family_of(seed: int, tool_share: float | None, long_share: float | None = None, open_ids: bool = False) -> str | None:
    """The family of training episode `seed`: the generator's mix (None), or, with tool_share,
    the tool channel for that share of the episodes (drawn from the seed alone) and the mix
    for the rest; with long_share, first that share from the long tool channel
    (`data.long_tool_episode`; with open_ids its variant whose identifiers are in no
    vocabulary of the generator, `data.LONG_OPEN`)."""
    import random

    if long_share is not None and random.Random(f"long:{seed}").random() < long_share:
        return D.LONG_OPEN if open_ids else D.LONG
    if tool_share is None:
        return None
    return "tool" if random.Random(f"family:{seed}").random() < tool_share else None


def sequences(template, seeds, max_len: int = MAX_LEN, tool_share: float | None = None,
              long_share: float | None = None, open_ids: bool = False):
    """Every training sequence of these episodes: (token ids, loss weights), cut to max_len."""
    out = []
    for s in seeds:
        done, _ = R.render(D.episode(s, family_of(s, tool_share, long_share, open_ids)), template)
        out += [(ids[:max_len], w[:max_len]) for ids, w in done]
    return out


COPY_KEYS = ("home address", "IBAN", "phone", "email", "favourite colour", "birthday", "code", "city", "provider",
             "name", "account", "link")


def repeat_question(value: str) -> str:
    return "Repeat: " + value


def lookup_question(pairs, key: str) -> str:
    """"key value" pairs, then a question for one key's value."""
    return "; ".join(f"{k} {v}" for k, v in pairs) + f". What is the {key}?"


def question_ids(template, q: str) -> list[int]:
    """The copying prompt: a user turn holding `q`, then the assistant's reply header."""
    return list(template.bos()) + list(template.block("user", q)) + list(template.header("reply"))


def copy_sequences(template, step: int, k: int):
    """k short sequences that teach copying from context (the induction circuit recall needs):
    repeat a random value, or recall the value of one key among several "key value" lines.
    Drawn from `step` alone. Loss on the copy."""
    import random

    rng = random.Random(f"copy:{step}")
    kinds = ("address", "iban", "phone", "email", "birthday", "colour", "never", "url", "preference")
    out = []
    for _ in range(k):
        vals = [D.value(rng, rng.choice(kinds)) for _ in range(rng.randint(2, 5))]
        if rng.random() < 0.3:  # random strings of tokens from the whole vocabulary
            vals = [template.detokenize([rng.randrange(3, 2000) for _ in range(rng.randint(2, 8))]) for _ in vals]
        if rng.random() < 0.4:
            q, a = repeat_question(vals[0]), vals[0]
        else:
            keys = rng.sample(COPY_KEYS, len(vals))
            j = rng.randrange(len(vals))
            q, a = lookup_question(zip(keys, vals), keys[j]), vals[j]
        ids = question_ids(template, q)
        ans = list(template.encode_raw(a)) + list(template.encode_raw("<|im_end|>"))
        out.append((ids + ans, [0.0] * len(ids) + [1.0] * len(ans)))
    return out


def batches(seqs, budget: int = 4096):
    """Sequences sorted by length and grouped so that rows × width ≤ budget (little padding).
    Yields token ids [B, S] and loss weights [B, S] (weight of predicting token s from s − 1)."""
    seqs = sorted(seqs, key=lambda s: (len(s[0]), s[0]))
    group: list = []
    for s in seqs + [None]:
        if s is not None and (not group or (len(group) + 1) * len(s[0]) <= budget):
            group.append(s)
            continue
        width = max(len(ids) for ids, _ in group)
        x = torch.zeros(len(group), width, dtype=torch.long)
        w = torch.zeros(len(group), width)
        for i, (ids, ws) in enumerate(group):
            x[i, :len(ids)] = torch.tensor(ids)
            w[i, :len(ws)] = torch.tensor(ws)
        yield x, w
        group = [s]


def loss_sum(model, x, w):
    """Σ weight · NLL over the batch, and Σ weight."""
    logits = model(input_ids=x).logits[:, :-1].float()
    tgt, wt = x[:, 1:], w[:, 1:]
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="none")
    return (nll * wt.reshape(-1)).sum(), wt.sum()


def accumulate(model, seqs, max_len: int, loss=None) -> tuple[float, int]:
    """One optimiser step's gradients: each batch's Σ weight · NLL (`loss`, default `loss_sum`) over
    the step's total weight, backpropagated. Returns the step's loss and its token positions."""
    loss = loss or loss_sum
    total = sum(sum(ws[1:]) for _, ws in seqs)
    out, tokens = 0.0, 0
    for x, w in batches(seqs, max(4096, max_len)):
        tokens += int(x.numel())
        part, _ = loss(model, x, w)
        (part / total).backward()
        out += float(part.detach()) / total
    return out, tokens


def schedule(step: int, steps: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    p = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))


def setup(threads: int = 1) -> None:
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)


def train(out: Path | None, steps: int, per_step: int = 8, minutes: float | None = None, lr: float = 3e-3,
          warmup: int = 50, tokenizer=None, log_every: int = 50, seed: int = 0, log=print, init: Path | None = None,
          copy: int = 0, tool_share: float | None = None, offset: int | None = None, threads: int = 1,
          attn: str = "eager", digits: bool = False, long_share: float | None = None, max_len: int = MAX_LEN,
          open_ids: bool = False) -> dict:
    """Train and (when `out`) save weights, tokenizer and a training record. Returns the record.
    `threads` and `attn` change the arithmetic (the order of float operations), so the same
    recipe under another setting gives other weights; each setting is deterministic on its own."""
    from unsee.impl.engine.templates import ChatMLTemplate

    setup(threads)
    started = time.perf_counter()
    if init is not None:  # continue from saved weights, with their tokenizer
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(init, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(init, local_files_only=True, dtype=torch.float32,
                                                     attn_implementation=attn)
    else:
        tok = tokenizer or build_tokenizer(digits=digits)
        model = new_model(len(tok), seed, attn)
    template = ChatMLTemplate(tok)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": rest, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95))
    losses, done_steps, stopped_early, tokens = [], 0, False, 0
    base = (0 if init is None else 10**8) if offset is None else offset  # a continuation draws new episodes
    copy_base = 0 if offset is None else offset
    for step in range(steps):
        if minutes is not None and time.perf_counter() - started > 60 * minutes:
            stopped_early = True
            log(f"stopping at step {step}: the {minutes} min budget is spent (the result now depends on speed)")
            break
        for g in opt.param_groups:
            g["lr"] = schedule(step, steps, lr, warmup)
        first = seed * 10**9 + base + step * per_step
        seqs = sequences(template, range(first, first + per_step), max_len, tool_share, long_share, open_ids) + \
            copy_sequences(template, copy_base + step, copy)
        opt.zero_grad(set_to_none=True)
        loss, seen = accumulate(model, seqs, max_len)
        tokens += seen
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss))
        done_steps = step + 1
        if log_every and (step % log_every == 0 or step == steps - 1):
            recent = losses[-log_every:]
            log(f"step {step:5d}  loss {sum(recent) / len(recent):.4f}  lr {opt.param_groups[0]['lr']:.2e}  "
                f"{time.perf_counter() - started:6.0f} s")
    model.eval()
    record = {"steps": done_steps, "planned_steps": steps, "episodes_per_step": per_step, "peak_lr": lr,
              "warmup": warmup, "seed": seed, "stopped_early": stopped_early, "tokens_seen": tokens,
              "seconds": round(time.perf_counter() - started, 1), "final_loss": sum(losses[-50:]) / max(1, len(losses[-50:])),
              "torch": torch.__version__, "threads": torch.get_num_threads(), "attn": attn, "max_len": max_len,
              "vocab": len(tok), "arch": ARCH, "init": None if init is None else str(init), "copy_per_step": copy,
              "tool_share": tool_share, "long_share": long_share, "open_ids": open_ids, "episode_offset": offset, "digit_tokens": _digit_tokens(tok),
              "parameters": sum(p.numel() for p in model.parameters()), "tool_calls": D.CALL_FORMAT}
    if out is not None:
        save(out, model, tok, record)
    record["losses"] = losses
    record["model"] = model
    record["tokenizer"] = tok
    return record


def _digit_tokens(tok) -> bool:
    """Whether the tokenizer cuts numbers into pairs of digits (see build_tokenizer)."""
    return all(len(tok.encode(n, add_special_tokens=False)) == (len(n) + 1) // 2 for n in ("2024", "00", "9876543"))


def save(out: Path, model, tok, record: dict) -> None:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    (out / "training.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--per-step", type=int, default=8, help="episodes per optimiser step")
    ap.add_argument("--minutes", type=float, default=None, help="stop early after this many minutes")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--init", type=Path, default=None, help="continue from these weights (and their tokenizer)")
    ap.add_argument("--copy", type=int, default=0, help="copying sequences per step (see copy_sequences)")
    ap.add_argument("--tool-share", type=float, default=None,
                    help="draw this share of the episodes from the tool channel, the rest from the generator's "
                         "mix (itself 20 %% tool); default: the mix alone")
    ap.add_argument("--offset", type=int, default=None,
                    help="first episode index (default 0, or 10^8 when continuing); the copy sequences then draw from it too")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (other weights than one thread's, as deterministic)")
    ap.add_argument("--attn", choices=("eager", "sdpa"), default="eager",
                    help="attention kernel while training (sdpa is faster on CPU; other weights than eager's)")
    ap.add_argument("--digits", action="store_true",
                    help="a new tokenizer cuts numbers into pairs of digits, a token each (only without --init)")
    ap.add_argument("--long-share", type=float, default=None,
                    help="draw this share of the episodes from the long tool channel (AgentDojo's lengths)")
    ap.add_argument("--open-ids", action="store_true",
                    help="the long tool channel's identifiers drawn in no vocabulary of the generator (data.open_value)")
    ap.add_argument("--max-len", type=int, default=MAX_LEN, help="cut training sequences to this many tokens")
    args = ap.parse_args(argv)
    if args.open_ids and args.long_share is None:
        ap.error("--open-ids changes the long tool channel: give --long-share too")
    if args.digits and args.init is not None:
        ap.error("--digits builds a new tokenizer; a continuation keeps the one of --init")
    rec = train(args.out, args.steps, args.per_step, args.minutes, args.lr, args.warmup, init=args.init, copy=args.copy,
                tool_share=args.tool_share, offset=args.offset, threads=args.threads, attn=args.attn,
                digits=args.digits, long_share=args.long_share, max_len=args.max_len, open_ids=args.open_ids)
    print(f"saved {args.out} after {rec['steps']} steps in {rec['seconds']:.0f} s, final loss {rec['final_loss']:.4f}")


if __name__ == "__main__":
    main()
