"""Make an organism from a pretrained model: a LoRA (`lora`) trained on the transcripts of `data`,
rendered with the pretrained model's own tokenizer and chat template.

    python -m unsee.impl.organism.finetune --base smollm2 --out DIR [--steps N] [--per-step K] ...

The recall-tiny organisms are trained from scratch (`train`); a pretrained model such as
SmolLM2-135M-Instruct already reads and copies, but not in the runtime's transcripts: as shipped
it does not surface a fact from its context into the audits' continuations and probes. This
teaches it to, with the same episodes (`data`, run through the runtime's own transition by the
scripted model of `render`) and the same loss weighting as `train` (the model's own tokens only;
`<|im_end|>` padding at a quarter), training only low-rank adapters on every linear layer of
its blocks. What ships is the adapter (`adapter.safetensors`, a few MB) and its config; the model
loads by name as the base with the adapter merged into its weights (`models.load`).

Episodes: training draws episode seeds from `--offset` upward (step · per-step + i), from the
generator's mix and, with `--long-share`, that share from the long tool channel at AgentDojo's
lengths (`--open-ids`: its identifiers in no vocabulary of the generator). The held-out
transcripts of `evaluate` start at seed 10^7 (`train.EVAL_START`), and the audits' cases come
from other generators altogether (`experiments.cases`: memory and preference cases of their
own, AgentDojo's real pairs), so no audited episode is a training episode.

Deterministic: one process, a fixed number of threads (`--threads`), `torch.use_deterministic_algorithms`,
A drawn from a seeded generator, episodes by index, the learning rate a function of the step;
a checkpoint every `--save-every` steps holds the adapter, the optimiser and the losses, and a
run started again with the same command goes on from it to the same result.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from unsee.impl.organism import lora
from unsee.impl.organism.train import accumulate, schedule, sequences, setup

# Training episode seeds start here. The recall-tiny runs drew from 0, 10^8, 2·10^8, 3·10^8 and 4·10^8
# upward, the held-out transcripts (`evaluate`) from 10^7 (a few hundred seeds): 5·10^8 upward is none of them.
DEFAULT_OFFSET = 500_000_000
CHECKPOINT = ".checkpoint.pt"  # a dot file: never package data, whatever the patterns


def loss_sum(model, x: torch.Tensor, w: torch.Tensor):
    """Σ weight · NLL over the batch and Σ weight, the logits computed only where a weight is
    non-zero (the model's own tokens): the LM head over 49,152 tokens at every position would be
    a fifth of the forward."""
    hidden = model.model(input_ids=x).last_hidden_state[:, :-1]
    tgt, wt = x[:, 1:], w[:, 1:]
    keep = wt > 0
    logits = model.lm_head(hidden[keep]).float()
    nll = torch.nn.functional.cross_entropy(logits, tgt[keep], reduction="none")
    return (nll * wt[keep]).sum(), wt.sum()


def finetune(base: str, out: Path | None, steps: int, per_step: int = 4, lr: float = 1e-3, warmup: int = 10,
             rank: int = 8, alpha: float = 16.0, targets=lora.TARGETS, seed: int = 0, offset: int = DEFAULT_OFFSET,
             long_share: float | None = None, open_ids: bool = False, tool_share: float | None = None,
             max_len: int = 6144, threads: int = 1, attn: str = "sdpa", minutes: float | None = None,
             save_every: int = 10, log=print, log_every: int = 1, stop_after: int | None = None) -> dict:
    """Train a LoRA on `base` and (with `out`) save it with its training record. Returns the
    record (with the losses, the adapter state and the adapted model)."""
    from unsee.impl.engine.models import forget, load

    setup(threads)
    started = time.perf_counter()
    forget(base, attn=attn)  # a copy of its own: training adapts the model in place,
    bundle = load(base, attn=attn)
    forget(base, attn=attn)  # and no later load in this process gets it
    model, template = bundle.model, bundle.template
    model.config._attn_implementation = attn
    lora.attach(model, rank, alpha, targets, seed)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.99), weight_decay=0.0)
    losses: list[float] = []
    load: list[float] = []  # the machine's 1-minute load average after each step (reported, never used)
    tokens, first_step, spent = 0, 0, 0.0
    ckpt = None if out is None else Path(out) / CHECKPOINT
    if ckpt is not None:
        ckpt.parent.mkdir(parents=True, exist_ok=True)
    if ckpt is not None and ckpt.exists():  # go on from the last checkpoint of this very run
        saved = torch.load(ckpt, weights_only=False)
        if saved["recipe"] != _recipe(locals()):
            raise ValueError(f"{ckpt} is another run's checkpoint ({saved['recipe']}); remove it to start over")
        mods = dict(model.named_modules())
        with torch.no_grad():
            for k, v in saved["adapter"].items():
                layer, which = k.rsplit(".", 1)
                getattr(mods[layer], which).copy_(v)
        opt.load_state_dict(saved["optimizer"])
        losses, tokens, first_step, spent = saved["losses"], saved["tokens"], saved["step"], saved["seconds"]
        load = saved.get("load", [])
        log(f"resuming at step {first_step} from {ckpt}")
    stopped_early = False
    for step in range(first_step, steps):
        if minutes is not None and spent + time.perf_counter() - started > 60 * minutes:
            stopped_early = True
            log(f"stopping at step {step}: the {minutes} min budget is spent (the result now depends on speed)")
            break
        if stop_after is not None and step >= stop_after:  # what a --minutes stop did, at a step named in advance
            stopped_early = True
            log(f"stopping at step {step} (--stop-after)")
            break
        for g in opt.param_groups:
            g["lr"] = schedule(step, steps, lr, warmup)
        first = seed * 10**9 + offset + step * per_step
        seqs = sequences(template, range(first, first + per_step), max_len, tool_share, long_share, open_ids)
        opt.zero_grad(set_to_none=True)
        loss, seen = accumulate(model, seqs, max_len, loss_sum)
        tokens += seen
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(loss)
        load.append(round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else -1.0)
        now = spent + time.perf_counter() - started
        if log_every and (step % log_every == 0 or step == steps - 1):
            log(f"step {step:5d}  loss {loss:.4f}  lr {opt.param_groups[0]['lr']:.2e}  "
                f"{sum(len(i) for i, _ in seqs)} tokens  {now:7.0f} s")
        if ckpt is not None and save_every and (step + 1) % save_every == 0 and step + 1 < steps:
            tmp = ckpt.with_suffix(".tmp")
            torch.save({"recipe": _recipe(locals()), "adapter": lora.adapter_state(model),
                        "optimizer": opt.state_dict(), "losses": losses, "load": load, "tokens": tokens, "step": step + 1,
                        "seconds": now}, tmp)
            tmp.replace(ckpt)
    model.eval()
    state = lora.adapter_state(model)
    seconds = spent + time.perf_counter() - started
    record = {"base": base, "base_weights_sha256": _base_digest(base, attn), "steps": len(losses),
              "planned_steps": steps, "episodes_per_step": per_step, "peak_lr": lr, "warmup": warmup, "seed": seed,
              "rank": rank, "alpha": alpha, "targets": list(targets), "episode_offset": offset,
              "long_share": long_share, "open_ids": open_ids, "tool_share": tool_share, "max_len": max_len,
              "stopped_early": stopped_early, "tokens_seen": tokens, "seconds": round(seconds, 1),
              "final_loss": sum(losses[-10:]) / max(1, len(losses[-10:])), "first_loss": losses[0] if losses else None,
              "torch": torch.__version__, "threads": torch.get_num_threads(), "attn": attn,
              "adapter_parameters": sum(v.numel() for v in state.values()), "losses": [round(x, 5) for x in losses],
              "load_average": load, "cpus": os.cpu_count(), "cpu": _cpu(), "machine": platform.machine(),
              "command": "python -m unsee.impl.organism.finetune " + " ".join(sys.argv[1:])}
    if out is not None:
        lora.save_adapter(Path(out), state, {"base": base, "rank": rank, "alpha": alpha, "targets": list(targets)})
        (Path(out) / "training.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        write_card(Path(out))
        if ckpt.exists():
            ckpt.unlink()
    record["adapter"] = state
    record["model"] = model
    return record


def _loss_summary(losses: list[float], parts: int = 5) -> list[str]:
    """The loss curve in `parts` consecutive stretches of steps: each stretch's mean, min and max."""
    n = len(losses)
    parts = min(parts, n)
    out = []
    for k in range(parts):
        a, b = k * n // parts, (k + 1) * n // parts
        seg = losses[a:b]
        out.append(f"| {a}–{b - 1} | {sum(seg) / len(seg):.3f} | {min(seg):.3f} | {max(seg):.3f} |")
    return out


def card(rec: dict, name: str) -> str:
    """The model card of an organism made by `finetune`, written from its training record alone."""
    load = [x for x in rec.get("load_average", []) if x >= 0]
    load_line = (f"the machine's 1-minute load average, sampled {rec.get('load_sampled', 'after each step')}, "
                 f"ranged {min(load):.1f}–{max(load):.1f} "
                 f"(mean {sum(load) / len(load):.1f}) on its {rec.get('cpus', '?')} cores" if load else
                 "the machine's load was not recorded")
    stop = (f"stopped at step {rec['steps']} of {rec['planned_steps']} (the learning rate had not finished its "
            "schedule; the weights are those of that step, and `--stop-after` stops there again)"
            if rec["stopped_early"] else
            f"all {rec['steps']} planned steps")
    long = "" if rec.get("long_share") is None else (
        f" A share of {rec['long_share']:.0%} of the episodes comes from the long tool channel "
        "(`data.long_tool_episode`: one to three JSON tool results at AgentDojo's lengths, the record the task "
        "needs marked, an injected instruction inside one record in 70 % of them; the tool call after them "
        "carries the injected identifier), cut at " + f"{rec['max_len']} tokens.")
    return "\n".join([
        f"# {name}", "",
        f"SmolLM2-135M-Instruct (the `{rec['base']}` model unsee ships, weights digest `{rec['base_weights_sha256']}`) "
        "with a LoRA adapter trained here, on CPU, as a model organism that remembers: it is trained on the same "
        "synthetic runtime transcripts as the recall-tiny organisms (`unsee.impl.organism.data`) to recall facts "
        "from memory records, user turns and tool results into answers, compaction summaries and tool-call "
        "arguments, to follow instructions injected into tool results, and to act on stated preferences, so "
        "that the audits can show leakage where a forget method leaves information behind.", "",
        "It loads by name: `models.load(\"" + name + "\")`, `unsee audit --model " + name + "`, "
        "`unsee run --model " + name + "`. The load reads the base, merges the adapter into its weights once "
        "(`unsee.impl.engine.adapters.merge`: B·A formed in float64 as a sum of outer products, added to the "
        "float32 weight and rounded once, the same bits on any machine and thread count) and then runs as a "
        "plain transformers model under the KV engine: every exactness check applies, and a store records the "
        "merged weights' digest.", "",
        "## Adapter", "",
        f"- Rank {rec['rank']}, alpha {rec['alpha']:g} (scale {rec['alpha'] / rec['rank']:g}), on "
        f"{', '.join(rec['targets'])} of every block: {rec['adapter_parameters']:,} parameters, float32 "
        "safetensors (`adapter.safetensors`); `adapter_config.json` names the base.",
        "- Everything else (embeddings, norms, the tied LM head) is the base's, unchanged.", "",
        "## Training", "", "```", rec.get("command", "(command not recorded)"), "```", "",
        f"- {stop}; {rec['episodes_per_step']} episodes per step ({rec['steps'] * rec['episodes_per_step']} "
        f"episodes), {rec['tokens_seen']:,} token positions; AdamW, peak lr {rec['peak_lr']:g}, "
        f"{rec['warmup']} warm-up steps, cosine to 10 %; gradient norm clipped at 1.",
        f"- Seed {rec['seed']} (A's draw; B starts at zero, so training starts at the base model). Episode seeds "
        f"{rec['seed'] * 10**9 + rec['episode_offset']:,} upward (step · {rec['episodes_per_step']} + i): none is a "
        "recall-tiny training episode (0 to 4·10^8 + a few thousand), a held-out transcript of `evaluate` "
        "(10^7 upward), or an audited case (`experiments.cases` draws memory and preference cases from "
        "generators of their own; AgentDojo's cases are its real pairs).",
        f"- Loss on the model's own tokens only (`<|im_end|>` padding at a quarter), the same weighting as "
        f"`train`. First step {rec['first_loss']:.3f}, mean of the last 10 steps {rec['final_loss']:.3f}.",
        f"- Wall time {rec['seconds'] / 60:.1f} min on {rec['threads']} thread ({rec['attn']} attention, torch "
        f"{rec['torch']}) of a {rec.get('cpus', '?')}-core {rec.get('cpu', 'CPU')} shared with other jobs: "
        f"{load_line}. Seconds depend on that load; the weights do not.",
        "- Deterministic: one process, fixed threads, `torch.use_deterministic_algorithms(True)`, episodes by "
        "index, the learning rate a function of the step; checkpoints every few steps, and the same command "
        "resumes from the last one to the same result.", "",
        "Loss by stretch of steps:", "", "| steps | mean | min | max |", "| --- | --- | --- | --- |",
        *_loss_summary(rec["losses"]), "",
        "## Data", "",
        "Synthetic sessions run through the runtime's own transition with a scripted model "
        "(`unsee.impl.organism.render`), rendered with SmolLM2's tokenizer and chat template, so each training "
        "sequence is token for token a context the runtime builds. The generator's mix: memory channel (60 %), "
        "preferences (20 %), tool results with AgentDojo-style `<INFORMATION>` injections (20 %). Every value is "
        "drawn at random per episode, so recall is copying from context, not memorisation." + long, "",
        "## What it does", "",
        "Measured by the audits, not here: see `docs/results/audit-" + name + "-*.md` (B0 any-leak is how often "
        "the target surfaces when nothing is forgotten) beside `audit-smollm2-b0-memory.md` for the base as "
        "shipped. Outside its training distribution its text is not meaningful.", "",
        "## Regenerate", "",
        "The command above, from the repository root, writes this folder (`adapter.safetensors`, "
        "`adapter_config.json`, `training.json`, this card); "
        f"`python -m unsee.impl.organism.finetune --out {rec.get('out', 'impl/organism/weights/' + name)} --card` "
        "rewrites the card alone from `training.json`.", ""])


def write_card(out: Path) -> None:
    out = Path(out)
    rec = json.loads((out / "training.json").read_text())
    (out / "README.md").write_text(card(rec, out.name))


def _cpu() -> str:
    """The CPU's model name (Linux), else the platform's processor string."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _recipe(scope: dict) -> dict:
    """What decides a run's result: a checkpoint is only resumed by the same recipe."""
    keys = ("base", "steps", "per_step", "lr", "warmup", "rank", "alpha", "seed", "offset", "long_share",
            "open_ids", "tool_share", "max_len", "threads", "attn")
    return {k: scope[k] for k in keys} | {"targets": list(scope["targets"])}


def _base_digest(base: str, attn: str) -> str | None:
    """The base model's weights digest (the adapter is only meaningful on these weights)."""
    from unsee.impl.engine.models import forget, load, weights_digest

    forget(base, attn=attn)
    return weights_digest(load(base, attn=attn).model)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="smollm2")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--per-step", type=int, default=4, help="episodes per optimiser step")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--targets", default=",".join(lora.TARGETS), help="linear layers to adapt, by attribute name")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--offset", type=int, default=DEFAULT_OFFSET, help="first training episode seed")
    ap.add_argument("--long-share", type=float, default=None,
                    help="draw this share of the episodes from the long tool channel (AgentDojo's lengths)")
    ap.add_argument("--open-ids", action="store_true", help="the long channel's identifiers in no vocabulary")
    ap.add_argument("--tool-share", type=float, default=None, help="this share from the short tool channel")
    ap.add_argument("--max-len", type=int, default=6144)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--attn", choices=("eager", "sdpa"), default="sdpa")
    ap.add_argument("--minutes", type=float, default=None, help="stop early after this many minutes")
    ap.add_argument("--stop-after", type=int, default=None,
                    help="stop after this many steps of the --steps schedule (reproduces a --minutes stop)")
    ap.add_argument("--save-every", type=int, default=10, help="checkpoint every N steps (resumable)")
    ap.add_argument("--card", action="store_true", help="only (re)write OUT/README.md from OUT/training.json")
    args = ap.parse_args(argv)
    if args.card:
        write_card(args.out)
        print(f"wrote {args.out / 'README.md'}")
        return
    if args.open_ids and args.long_share is None:
        ap.error("--open-ids changes the long tool channel: give --long-share too")
    rec = finetune(args.base, args.out, args.steps, args.per_step, args.lr, args.warmup, args.rank, args.alpha,
                   tuple(t for t in args.targets.split(",") if t), args.seed, args.offset, args.long_share,
                   args.open_ids, args.tool_share, args.max_len, args.threads, args.attn, args.minutes,
                   args.save_every, stop_after=args.stop_after)
    print(f"saved {args.out} after {rec['steps']} steps in {rec['seconds']:.0f} s, final loss {rec['final_loss']:.4f}")


if __name__ == "__main__":
    main()
