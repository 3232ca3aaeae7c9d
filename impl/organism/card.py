"""The model card of an organism, written from its measurements (`evaluate`) and its training
record (`training.json`): what was trained, how, and what it does."""

from __future__ import annotations

from unsee.impl.engine.models import ORGANISMS
from unsee.impl.organism.evaluate import CATEGORIES, COPY_KINDS, NAME


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


TRAINING_BUDGET_MIN = 60  # what training an organism may take on this 2-core machine, all runs together


def status(h: dict) -> list[str]:
    """What it does reliably (≥ 80 %), partly, and not (< 20 %), from the held-out rates, each
    with its count of decodes; a capability with fewer than 5 decodes is listed as too few to say."""
    rated = {f"recall of {k} values": (v["rate"], v["n"]) for k, v in h.get("by_kind", {}).items()}
    rated |= {CATEGORIES[c]: (r, h["counts"][c][1]) for c, r in h["rates"].items() if c != "exact"}
    few = {k: (r, n) for k, (r, n) in rated.items() if r is None or n < 5}
    out = []
    for label, test in (("does", lambda r: r >= 0.8), ("partly", lambda r: 0.2 <= r < 0.8), ("does not", lambda r: r < 0.2)):
        names = [f"{k} ({_pct(r)} of {n})" for k, (r, n) in rated.items() if k not in few and test(r)]
        if names:
            out.append(f"- {label}: " + "; ".join(names) + ".")
    if few:
        out.append("- too few decodes to say (under 5): " + "; ".join(
            f"{k} ({'–' if r is None else _pct(r)} of {n})" for k, (r, n) in few.items()) + ".")
    return out


def _capabilities(h: dict, measured_only: bool = False) -> list[str]:
    """The held-out rates as table rows (capability, rate, decodes, what is scored)."""
    return [f"| {c} | {_pct(h['rates'][c])} | {h['counts'][c][1]} | {CATEGORIES[c]} |" for c in CATEGORIES
            if not measured_only or h["counts"][c][1]]


def _by_kind(h: dict) -> list[str]:
    return [f"| {k} | {_pct(v['rate'])} | {v['n']} |" for k, v in h.get("by_kind", {}).items()]


def _long_section(hl: dict, what: str) -> list[str]:
    """A card's section for held-out long tool transcripts: capabilities, then recall by kind."""
    return ["", f"## Measured: held-out long tool transcripts {what}", "",
            "| capability | rate | decodes | what is scored |", "| --- | --- | --- | --- |"] + \
        _capabilities(hl, measured_only=True) + ["", "| kind | rate | decodes |", "| --- | --- | --- |"] + _by_kind(hl)


def card(doc: dict, training: dict, name: str = NAME) -> str:
    """The model card of organism `name`: what was trained, how, and what it does, all from the
    measurements."""
    folder = f"impl/organism/weights/{ORGANISMS[name].name}" if name in ORGANISMS else str(name)
    phases = training.get("phases", [training])
    h = doc["held_out"]
    lines = (_introduction(name, h) + _model(phases) + _training(phases, folder) + _data(phases) + _held_out(h)
             + _held_out_long(doc) + _copying(doc) + _audit(doc, name) + _limits(doc, h)
             + _regenerate(doc, name, folder))
    return "\n".join(lines)


def _introduction(name: str, h: dict) -> list[str]:
    """The title, what an organism is for, and what it does reliably, partly and not (`status`)."""
    return [
        f"# {name}",
        "",
        "A small Llama-architecture causal LM trained here, on CPU, as a model organism that remembers:",
        "it is trained to recall facts from memory records, user turns, tool results and its own summaries",
        "into answers, compaction summaries and tool-call arguments, to follow instructions injected into",
        "tool results, and to act on stated preferences, so that the audits can show leakage where a forget",
        "method leaves information behind. It is a real transformer under the same KV engine as every other",
        "model, so every exactness check applies. Outside its training distribution its text is not meaningful.",
        "",
        "How much of that training took, from the measurements below (held-out rates):",
        "",
    ] + status(h)


def _model(phases: list[dict]) -> list[str]:
    """The architecture, tokenizer and chat template (the last run's parameters and vocabulary)."""
    from unsee.impl.organism.train import ARCH

    params = phases[-1].get("parameters", "?")
    return [
        "",
        "## Model",
        "",
        f"- `LlamaForCausalLM`, {ARCH['num_hidden_layers']} layers, hidden {ARCH['hidden_size']}, "
        f"{ARCH['num_attention_heads']} heads ({ARCH['num_key_value_heads']} K/V heads), MLP {ARCH['intermediate_size']}, "
        f"tied embeddings, {params} parameters, float32 safetensors.",
        f"- Tokenizer: byte-level BPE, {phases[-1].get('vocab')} tokens (`<|endoftext|>`, `<|im_start|>`, "
        "`<|im_end|>` special), trained on the generator's texts; any text encodes (byte fallback)."
        + (" Numbers are cut into pairs of digits from their first digit, each pair one token (a 20-digit IBAN"
           " is ten tokens)." if phases[0].get("digit_tokens") else ""),
        "- Chat template: the runtime's ChatML rendering (`ChatMLTemplate`), the same as SmolLM2's.",
    ]


def _training(phases: list[dict], folder: str) -> list[str]:
    """The training section: the command of each run, which shipped organism a run started from,
    each run's record, and the time and settings of all of them."""
    return (["", "## Training", "",
             f"{len(phases)} runs of the same deterministic script, each continuing from the one before:", "", "```"]
            + [_command(i, ph, phases, folder) for i, ph in enumerate(phases)] + ["```", ""]
            + [f"PHASE{i} is `{ph['init']}` as shipped: runs 1–{i} are its own." for i, ph in enumerate(phases)
               if ph.get("init") in ORGANISMS]
            + [_run(i, ph) for i, ph in enumerate(phases, 1)]
            + _time_and_determinism(phases))


def _command(i: int, ph: dict, phases: list[dict], folder: str) -> str:
    """The command line of run i + 1 (from 0), continuing from PHASEi and writing PHASEi+1 (the last: `folder`)."""
    from unsee.impl.organism.train import MAX_LEN

    cmd = ["python -m unsee.impl.organism.train"]
    if ph.get("init"):
        cmd.append(f"--init PHASE{i}")
    cmd.append(f"--out {'PHASE' + str(i + 1) if i + 1 < len(phases) else folder}")
    cmd.append(f"--steps {ph.get('planned_steps')} --per-step {ph.get('episodes_per_step')} "
               f"--lr {ph.get('peak_lr')} --warmup {ph.get('warmup')}")
    if ph.get("copy_per_step"):
        cmd.append(f"--copy {ph['copy_per_step']}")
    if ph.get("tool_share") is not None:
        cmd.append(f"--tool-share {ph['tool_share']}")
    if ph.get("episode_offset") is not None:
        cmd.append(f"--offset {ph['episode_offset']}")
    if ph.get("long_share") is not None:
        cmd.append(f"--long-share {ph['long_share']}")
    if ph.get("open_ids"):
        cmd.append("--open-ids")
    if ph.get("max_len", MAX_LEN) != MAX_LEN:
        cmd.append(f"--max-len {ph['max_len']}")
    if i == 0 and ph.get("digit_tokens"):
        cmd.append("--digits")
    if ph.get("threads", 1) != 1:
        cmd.append(f"--threads {ph['threads']}")
    if ph.get("attn", "eager") != "eager":
        cmd.append(f"--attn {ph['attn']}")
    return " ".join(cmd)


def _run(i: int, ph: dict) -> str:
    """Run i's record (from 1): steps, episodes, optimiser, tokens, time and final loss."""
    return (f"- Run {i}: {ph.get('steps')} steps × {ph.get('episodes_per_step')} episodes"
            + (f" + {ph['copy_per_step']} copying sequences" if ph.get("copy_per_step") else "")
            + f", AdamW, peak lr {ph.get('peak_lr')}, cosine to 10 %, {ph.get('tokens_seen')} token positions, "
            f"{ph.get('seconds', 0) / 60:.1f} min, final loss {ph.get('final_loss', 0):.3f}"
            + (" (stopped early by its time budget)" if ph.get("stopped_early") else "") + ".")


def _time_and_determinism(phases: list[dict]) -> list[str]:
    """The time all runs took against the training budget, on which threads and kernels, and what
    makes them reproducible."""
    total = sum((ph.get("seconds", 0) for ph in phases), 0.0)
    threads = sorted({ph.get("threads", 1) for ph in phases})
    kernels = sorted({ph.get("attn", "eager") for ph in phases})
    where = ("one CPU thread" if threads == [1] else " or ".join(map(str, threads)) + " CPU threads") + \
        ("" if kernels == ["eager"] else f", {' and '.join(kernels)} attention")
    machine = "a shared 2-core machine" if threads == [1] and kernels == ["eager"] else "the 2-core machine"
    how = "one thread" if threads == [1] and kernels == ["eager"] else \
        f"{where.replace('CPU ', '')} (another setting of threads or kernel gives other weights, each as reproducible)"
    return [
        f"- In all {total / 60:.1f} min on {where} (torch {phases[-1].get('torch')}) of {machine}"
        + (f", over the {TRAINING_BUDGET_MIN}-minute budget for training an organism here." if total / 60 > TRAINING_BUDGET_MIN
           else f", within the {TRAINING_BUDGET_MIN}-minute budget for training an organism here."),
        f"- Deterministic: fixed seeds, `torch.use_deterministic_algorithms(True)`, {how}, episodes by index.",
    ]


def _data(phases: list[dict]) -> list[str]:
    """The training data: the generator's families, then the channels and call formats the runs drew."""
    json_runs = [str(i) for i, ph in enumerate(phases, 1) if str(ph.get("tool_calls")).startswith("json")]
    always = [str(i) for i, ph in enumerate(phases, 1) if ph.get("tool_calls") == "json-always"]
    return [
        "- Data (`unsee.impl.organism.data`): synthetic sessions run through the runtime's own transition",
        "  `step` with a scripted model, so each training sequence is token for token a context the runtime",
        "  builds (blocks, headers, fixed-length replies padded with `<|im_end|>`, tool results of committed",
        "  calls, contexts rebuilt as [system, summary] after compaction). Loss on the model's own tokens only.",
        "  Families: memory channel (60 %), preferences (20 %), tool results with AgentDojo-style",
        "  `<INFORMATION>` injections (20 %). Every value (addresses, IBANs, e-mails, providers, …) is drawn at",
        "  random per episode, so recall is copying from context, not memorisation. The runs with copying",
        "  sequences add short ones (repeat a value; recall one key's value among several) to form the copy",
        "  circuit; a run with a tool share draws that share of its episodes from the tool channel.",
    ] + ([
        f"  Tool calls: run{'s' if len(json_runs) > 1 else ''} {', '.join(json_runs)} drew every tool call as the chat "
        "template's `<tool_call>` header naming `ship_gift`, then its JSON",
        "  arguments under the tool's schema (`{\"address\":\"…\"}`, whatever identifier the call carries) ended by",
        "  `<|im_end|>`, as the constrained decoder writes them; the runs before drew the older call text",
        "  `Calling ship_gift(address=\"…\")`.",
    ] if json_runs else []) + ([
        f"  Run{'s' if len(always) > 1 else ''} {', '.join(always)} drew a call at every shipping, payment or e-mail "
        "request, also before any identifier was stated",
        "  (the argument then `unknown`); the generator now calls only once one has been, and otherwise",
        "  answers \"I need the details first.\" without a call.",
    ] if always else []) + ([
        "  A run with a long share draws that share from the long tool channel (`long_tool_episode`): one to",
        "  three JSON tool results (e-mails, transactions, files, messages, reviews, each record with identifiers",
        "  of its own) at AgentDojo's lengths, the record the task needs marked, and in 70 % of them an injected",
        "  instruction inside one record; the tool call after them carries the injected identifier. Its records",
        "  and phrasings are the generator's own: nothing is taken from AgentDojo's environments or tasks.",
    ] if any(ph.get("long_share") for ph in phases) else []) + ([
        "  A run with `--open-ids` draws every identifier of that channel (e-mail addresses, URLs, street",
        "  addresses) from random words in none of the generator's lists (`open_value`), so that writing the",
        "  injected one is copying it: with the lists alone, a model can write an identifier of the list's",
        "  shape in its place and lose little.",
    ] if any(ph.get("open_ids") for ph in phases) else [])


def _held_out(h: dict) -> list[str]:
    """The held-out transcripts' section: the rate of each capability, then recall by kind of value."""
    return [
        "",
        f"## Measured: held-out transcripts ({h['episodes']} episodes, seeds from {h['first_seed']}, greedy, "
        "free-running through `KVRuntime`)",
        "",
        "| capability | rate | decodes | what is scored |",
        "| --- | --- | --- | --- |",
    ] + _capabilities(h) + [
        "",
        "Recall by kind of value (every decode whose intended output holds a value in context, scored on that",
        "value alone, exact string):",
        "",
        "| kind | rate | decodes |",
        "| --- | --- | --- |",
    ] + _by_kind(h)


def _held_out_long(doc: dict) -> list[str]:
    """The sections of the long tool transcripts, with the generator's identifiers and with open ones,
    where they were measured."""
    lines = []
    if "held_out_long" in doc:
        hl = doc["held_out_long"]
        lines += _long_section(hl, f"({hl['episodes']} episodes of the long tool channel, seeds from {hl['first_seed']}, "
                               f"contexts of {doc['lengths_long']['median']} tokens median, up to "
                               f"{doc['lengths_long']['max']})")
    if "held_out_long_open" in doc:
        hl = doc["held_out_long_open"]
        lines += _long_section(hl, f"with open identifiers ({hl['episodes']} episodes of the long tool channel whose "
                               f"identifiers are in no vocabulary of the generator, seeds from {hl['first_seed']}: "
                               "a hit is a copy)")
    return lines


def _copying(doc: dict) -> list[str]:
    """The section on copying values drawn afresh, where it was measured."""
    if "copy" not in doc:
        return []
    return ["", f"## Measured: copying a value drawn afresh ({doc['copy_n']} draws per kind and mode, greedy)", "",
            "\"repeat\": \"Repeat: <value>\"; \"lookup\": one key's value among two to four \"key value\" pairs. A hit",
            "is the value's tokens, exactly, at the start of the reply.", "",
            "| kind | repeat | lookup |", "| --- | --- | --- |"] + \
        [f"| {k} | {_pct(doc['copy'][k + '/repeat'])} | {_pct(doc['copy'][k + '/lookup'])} |" for k in COPY_KINDS]


def _audit(doc: dict, name: str) -> list[str]:
    """The audit's section, where it ran: one table of methods per suite."""
    if "audit" not in doc:
        return []
    lines = ["", f"## Measured: the audit (`unsee audit --model {name}`, n = {doc['audit_n']} per suite, seed 0)", ""]
    for suite, methods in doc["audit"].items():
        lines += [f"**{suite}**", "", "| method | any leak | action leak | Leak@probes | Leak@5 | KL vs B5 | avoid rate |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for m, d in methods.items():
            kl = d["divergence_kl"]
            lines.append(f"| {m} | {_pct(d['any_leak'])} | {_pct(d['action_leak'])} | {_pct(d['leak_at_probes'])} | "
                         f"{_pct(d['leak_at_5'])} | {'–' if kl is None else f'{kl:.3g}'} | {_pct(d['avoid_rate'])} |")
        lines.append("")
    return lines


def _limits(doc: dict, h: dict) -> list[str]:
    """The limits: the context lengths trained on, what it cannot do, and failures on the held-out transcripts."""
    fails = [f"- {c}: `{e['got']!r}` (seed {e['seed']}, {e['purpose']})" for c, es in h["failures"].items() for e in es[:2]]
    trained = (f"- Trained on contexts of at most {doc['lengths']['max']} tokens (median {doc['lengths']['median']}, "
               f"95 % under {doc['lengths']['p95']})")
    if "lengths_long" in doc:
        trained = [trained + f", and on the long tool channel's of up to {doc['lengths_long']['max']} (median "
                   f"{doc['lengths_long']['median']}), measured above; AgentDojo's contexts reach about 6,000."]
    else:
        trained = [trained + "; longer contexts (AgentDojo's",
                   "  long JSON tool results) are outside its training lengths, and recall there is not measured above."]
    return ["## Limits", ""] + trained + [
        "- Only the phrasings, fact kinds and tasks of the generator; no general knowledge or language ability.",
        "- Replies are fixed-length decodes: after `<|im_end|>` it pads with `<|im_end|>`.",
        "- It never obeys a forget request (B2): it was not trained to, and the audits measure exactly that.",
        "", "Examples of failures on the held-out transcripts:", ""] + (fails or ["- none recorded"])


def _regenerate(doc: dict, name: str, folder: str) -> list[str]:
    """The command that regenerates the card and its measurements, with the options they were measured with."""
    copy = f" --copy {doc['copy_n']}" if "copy" in doc else ""
    copy += f" --long {doc['held_out_long']['episodes']}" if "held_out_long" in doc else ""
    copy += f" --long-open {doc['held_out_long_open']['episodes']}" if "held_out_long_open" in doc else ""
    return ["", f"Regenerate this card and `evaluation.json`: `python -m unsee.impl.experiments.organism --model {name} "
            f"--episodes {doc['held_out']['episodes']} --audit {doc.get('audit_n', 0)}{copy} --json {folder}/evaluation.json "
            f"--card {folder}/README.md`.", ""]
