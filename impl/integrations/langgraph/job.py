"""One forget of one thread, decided before anything is written: Algorithm 1's plan on a LangGraph thread.

`prepare_job` reads a thread as a session of `unsee.model` (one observation per turn, G_T, a
checkpoint at every turn boundary), plans the forget with `plan_forget` (lines 1–4), and returns
the job whose `steps` are the replayed turns' inputs on the sanitized inputs (lines 5–10), whose
`ledger` is line 8's report and whose `receipt` is the `ThreadReceipt`. `forget` runs one job on a
thread; `across` runs one per thread where threads share a store.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Sequence

from langchain_core.messages import AIMessage, RemoveMessage, ToolMessage

from unsee.impl.integrations.langgraph.declared import exactness
from unsee.impl.integrations.langgraph.history import check_history, checkpoint_id, config_at, interrupts
from unsee.impl.integrations.langgraph.inputs import (
    ThreadInputs, input_of, messages_in, messages_of, part_text, read_inputs,
)
from unsee.impl.integrations.langgraph.savers import Row
from unsee.impl.integrations.langgraph.tools import Replay, resolve
from unsee.model.errors import UnknownSource, UnseeError
from unsee.model.grammar import canonical
from unsee.model.plan import Checkpoint, compensation, plan_forget
from unsee.model.receipt import Effects, Receipt, Work, make_receipt
from unsee.model.replay import Session, sanitize
from unsee.model.state import Artifact, Config, LedgerEntry, Observation, State

REMOVE_ALL = "__remove_all__"
ERASED = '{"unsee_erased":true}'  # a redacted ledger row's arguments (forget(..., redact_ledger=True))


@dataclass(frozen=True)
class ThreadReceipt(Receipt):
    """The model's receipt (plan, work, side effects), and what the forget did to the thread and
    its checkpointer."""

    thread_id: str = ""
    exactness: str = "checked"  # "declared": a model the user declared deterministic was replayed unchecked
    checkpointer: str = ""  # the adapter: memory, sqlite or postgres
    fork_checkpoint_id: str = ""
    head_checkpoint_id: str = ""
    checkpoints_deleted: int = 0
    writes_deleted: int = 0
    blobs_deleted: int = 0
    ledger_redacted: int = 0  # ledger rows whose arguments and result were erased (redact_ledger=True)
    tools_served: int = 0  # read-only calls answered with what they returned before
    # where the replay stopped at a pending interrupt, the twin's human not having answered yet:
    # {"turn": the first turn not replayed, "why": ..., "asked": the replay's questions there}; {} if it did not
    stopped: dict = field(default_factory=dict)
    # a graph with a store (`shared`): every other thread the forget replayed because it read what the
    # target changed, each with its own receipt (its plan's source: the read), and what the store lost,
    # changed or gained: {"items_removed", "items_changed", "items_added", "spans", "spans_kept"}
    threads: tuple = ()
    store: dict = field(default_factory=dict)


def artifacts_of(log: Sequence[Observation]) -> tuple[Artifact, ...]:
    """G_T, the conservative provenance graph of a thread: each turn's fields (one per visible
    part, no parents) and the turn's state, derived from its fields and the previous turn's
    state (every node of a turn may read the whole state)."""
    out, last = [], ()
    for t, o in enumerate(log, 1):
        fields_ = []
        for k, p in enumerate(o.visible, 1):
            fields_.append(Artifact(f"t{t}.{k}.{o.kind}", o.kind, (), frozenset({p.source}), None, t))
        src = frozenset().union(*(a.source_ids for a in fields_ + list(last)))
        state = Artifact(f"t{t}.state", "state", tuple(a.id for a in fields_) + tuple(a.id for a in last), src, None, t)
        out += fields_ + [state]
        last = (state,)
    return tuple(out)


def session_of(log: Sequence[Observation], world=(), paused=frozenset()) -> Session:
    """The thread as a session of the model (observations, G_T, a checkpoint at every boundary
    but those `paused`: where a resume or an edit follows, whose old answer or values are written
    on that checkpoint, so a fork there would find them)."""
    cfg = Config()
    state = State(cfg, turn=len(log), artifacts=artifacts_of(log))
    checkpoints = tuple(Checkpoint(b, 0, f"thread:{b}", "", ()) for b in range(len(log) + 1) if b not in paused)
    return Session(cfg, "every", tuple(log), (state,), checkpoints, world=tuple(world))


def _recorded(tuples) -> dict:
    """(tool, canonical args) → the results the forgotten branch's calls got, from its messages."""
    calls, out = {}, {}
    for t in tuples:
        for m in messages_in(t):
            if isinstance(m, AIMessage):
                for c in m.tool_calls:
                    calls[c["id"]] = (c["name"], canonical(c["args"]))
            elif isinstance(m, ToolMessage) and m.tool_call_id in calls:
                out.setdefault(calls[m.tool_call_id], [m.content])
    return out


def drafts_of(line, turns_) -> dict:
    """turn → [(kind, tokens)]: the replies UnseeChatModel wrote on a branch (kind "call": a tool
    call's JSON arguments, "reply": a text reply), in order, for a replay to check as drafts."""
    out: dict = {}
    seen: set = set()
    turn = 0
    for i, t in enumerate(line):
        while turn < len(turns_) and turns_[turn].first <= i:
            turn += 1
        for m in messages_in(t):
            meta = m.additional_kwargs.get("unsee") or {} if isinstance(m, AIMessage) else {}
            if m.id in seen or "tokens" not in meta:
                continue
            seen.add(m.id)
            kind = "call" if m.tool_calls or m.invalid_tool_calls else "reply"
            out.setdefault(turn, []).append((kind, meta["tokens"][-meta["segments"][-1]:]))
    return out


# --- the job ----------------------------------------------------------------------------------------

def check_arguments(sources_, method) -> None:
    if isinstance(sources_, str):
        raise UnseeError(f"sources is a list of source ids: forget(graph, thread_id, [{sources_!r}])")
    if method not in ("B7", "B5"):
        raise UnseeError(f"method {method!r} is not B7 or B5")


@dataclass
class _Job:
    """One forget, decided before anything is written: the plan, the replay's inputs and what
    the tools and the model are handed while it runs."""

    thread_id: str
    method: str
    th: ThreadInputs
    raw_rows: list  # the ledger as stored
    rows: list  # the ledger, resolved
    plan: object
    session: Session
    how: str
    replay: Replay
    replayed: list = field(default_factory=list)
    stopped: dict = field(default_factory=dict)  # where a replay ended at a pending interrupt, and why
    derived_ids: bool = True  # the graph is forgettable: ids derive from the history (else the replay keeps the old ones)

    @classmethod
    def prepare(cls, thread_id, srcs, method, checkpoint, tuples, pending, rows, reads=None) -> "_Job":
        """`reads`: turn → parts its observation also holds for the plan (a store read whose result
        the forget changed, `shared`), so `plan_forget` places τ at the first of them."""
        line = check_history(tuples, thread_id, tuple(pending or ()))
        th = read_inputs(line, thread_id)
        raw, rows = rows, resolve(rows, tuples)
        # R_b where turn b+1 resumes an interrupt or edits the state: the old branch's answer or edit is
        # written on R_b itself (a pending write), so a fork there would find it; fork before it
        paused = {t.index - 1 for t in th.turns if t.resumed or t.updated}
        log = [Observation(o.kind, o.parts + tuple((reads or {}).get(t, ())), o.reply, o.tool, o.compact)
               for t, o in enumerate(th.log, 1)]
        s = session_of(log, [LedgerEntry(r.call_id, r.tool, r.args, r.turn) for r in rows], paused)
        plan = plan_forget(s, srcs, checkpoint, reset=method == "B5")  # lines 1–4
        old = line
        how = exactness([m for t in old for m in messages_in(t)], th.input_ids)
        replay = Replay(recorded=_recorded(old), committed={r.call_id: LedgerEntry(r.call_id, r.tool, r.args, r.turn)
                                                            for r in rows},
                        results={r.call_id: r.result for r in rows},
                        drafts=drafts_of(old, th.turns) if method == "B7" else {})
        job = cls(thread_id, method, th, raw, rows, plan, s, how, replay)
        job._check_removals()
        job._check_tool_questions()
        return job

    def _check_tool_questions(self) -> None:
        """A question asked inside a consequential tool (`interrupt()` in its body) cannot be asked
        again by a replay, which never runs such a tool's body: refused where a replayed turn resumes
        one. Such a tool's call fires in the task that asked, so its ledger row names the checkpoint the
        thread paused at (a review node's tool runs in a later step, from a later checkpoint)."""
        paused = {checkpoint_id(t.start): t.index for t in self.th.turns[self.plan.boundary:] if t.resumed}
        for r in self.raw_rows:
            if r.checkpoint_id in paused:
                raise UnseeError(f"turn {paused[r.checkpoint_id]} answers a question asked inside the consequential tool "
                                 f"{r.tool!r} (interrupt() in its body); a replay never runs a consequential tool's "
                                 "body, so it cannot ask that question again: ask in a node before the tool "
                                 "(LangGraph's review-node pattern), whose question a forget replays")

    def _check_removals(self) -> None:
        """A kept RemoveMessage of a replayed turn must remove a message the replay will hold under
        the same id: one in R_c, or an input with an id of its own; a model's or tool's message
        written after the fork may come back different, under another id."""
        c = self.plan.boundary
        present = {m.id for m in messages_in(self.th.turns[c - 1].end)} if c else set()
        for t in self.th.turns[c:]:
            o = sanitize(self.th.log[t.index - 1], self.plan.sources)
            kept = {(p.source, p.text) for p in o.parts}
            for m, s in zip(self.th.messages[t.index - 1], self.th.sources[t.index - 1]):
                if (s, part_text(m)) not in kept:
                    continue
                if isinstance(m, RemoveMessage) and m.id != REMOVE_ALL and m.id not in present:
                    raise UnseeError(f"turn {t.index} removes message {m.id!r}, which was written after the fork "
                                     f"point (turn {c}) and may come back under another id in the replay; a forget "
                                     "cannot replay that removal")
                if not isinstance(m, RemoveMessage) and m.id is not None:
                    present.add(m.id)

    def steps(self):
        """(input, config, asked) of each replayed turn, c+1..T, on the sanitized inputs (lines
        5–10): each input key re-given without the forgotten parts, and the config the turn ran
        with (its `configurable` keys, as LangGraph recorded them in the turn's checkpoint
        metadata). Each input is ("invoke", input) or, for an edit, ("update", values, as_node). A
        resume turn's input is `Command(resume=answer)` and `asked` the questions its human
        answered: the caller resumes only where the replay asks the same (`stop` otherwise). A
        resume whose answer is forgotten stops the replay: the twin stands before its human answered."""
        from langgraph.types import Command

        c = self.plan.boundary
        fork = config_at(self.thread_id, self.th.turns, c)["configurable"]  # line 5: the fork
        for t in self.th.turns[c:]:
            i = t.index - 1
            o = sanitize(self.th.log[i], self.plan.sources)
            if t.resumed and not o.parts:
                self.stop(t.index, "its answer was forgotten")
                return
            kept = {(p.source, p.text) for p in o.parts}
            self.replayed.append(o)
            self.replay.turn, self.replay.seen = t.index, {}
            ran = t.after if t.resumed else t.start  # the checkpoint the turn's own invocation wrote first
            config = {"configurable": recorded_config(ran.metadata) | {"thread_id": self.thread_id} | fork}
            fork = {}
            if t.resumed:
                yield ("invoke", Command(resume=t.resume)), config, interrupts(t.start)
                continue
            if t.updated:  # an edit: the values kept, made as the same node (an empty edit where all are forgotten)
                yield ("update", input_of(self.th.values[i], kept, t.input, skip=()), t.as_node or None), config, None
                continue
            values = {(v.source, v.text) for v in self.th.values[i]}
            said = Observation(o.kind, tuple(p for p in o.parts if (p.source, p.text) not in values))
            msgs = messages_of(said, self.th.messages[i], self.th.sources[i], self.th.raws[i],
                               None if self.derived_ids else self.th.ids[i])
            inp = ({"messages": msgs} if msgs or "messages" in t.input else {}) | input_of(self.th.values[i], kept, t.input)
            inp = {k: inp[k] for k in t.input if k in inp}  # the keys in the order the turn gave them
            yield ("invoke", inp), config, None

    def stop(self, turn: int, why: str, asked=None) -> None:
        """The replay ends before `turn`: the thread stays paused at the interrupt there, as the
        twin stands before its human answers; the turns from `turn` on are not replayed."""
        if asked is not None:
            self.replayed.pop()  # the resume was not run
        self.stopped = {"turn": turn, "why": why} | ({} if asked is None else {"asked": asked})

    def ledger(self, redact: bool) -> tuple[list[Row], list[dict], list[str], int]:
        """The ledger rows to write (turns resolved, and with `redact` the arguments and result of each
        call listed for compensation as never made by the twin erased), line 8's report."""
        dedup, comp = compensation(self.session.world, self.replay.effects, self.plan.boundary)  # (A3)
        gone = {c["call_id"] for c in comp if c["reason"] == "counterfactual makes no such call"} if redact else set()
        stored = {r.seq: r for r in self.raw_rows}
        out, n = [], 0
        for r in self.rows:
            if r.call_id in gone:
                r = Row(r.seq, r.checkpoint_id, f"t{r.turn}:{r.tool}:erased-{r.seq}", r.tool, ERASED, r.turn, "")
                n += 1
            if r != stored[r.seq]:
                out.append(r)
        return out, comp, dedup, n

    def receipt(self, line, erased, comp, dedup, redacted, seconds, kind) -> ThreadReceipt:
        c = self.plan.boundary
        fork = "" if c == 0 else checkpoint_id(self.th.turns[c - 1].end)
        work = Work(transitions=len(self.replayed), tokens_decoded=self.replay.decoded, replies=self.replay.replies,
                    replies_skipped=self.replay.skipped)
        r = make_receipt(self.method, self.plan, work, Effects(tuple(dedup), tuple(comp)), {}, seconds, self.replayed)
        return ThreadReceipt(**{f.name: getattr(r, f.name) for f in fields(Receipt)}, thread_id=self.thread_id,
                             exactness=self.how, checkpointer=kind, fork_checkpoint_id=fork,
                             head_checkpoint_id=checkpoint_id(line[-1]), checkpoints_deleted=erased["checkpoints_deleted"],
                             writes_deleted=erased["writes_deleted"], blobs_deleted=erased["blobs_deleted"],
                             ledger_redacted=redacted, tools_served=self.replay.served, stopped=dict(self.stopped))


NOTHING = {"checkpoints_deleted": 0, "writes_deleted": 0, "blobs_deleted": 0}
LANGGRAPH_METADATA = {"source", "step", "parents", "writes", "run_id", "counters_since_delta_snapshot"}


def recorded_config(metadata) -> dict:
    """The `configurable` keys a turn ran with, as LangGraph copied them into its checkpoint's
    metadata (`get_checkpoint_metadata`: strings, numbers and booleans whose key does not start
    with "__"; the config's `metadata` entries are copied there too, and come back as configurable)."""
    return {k: v for k, v in (metadata or {}).items() if k not in LANGGRAPH_METADATA and not k.startswith("__")
            and not k.startswith("unsee_")}


STOP_OTHER = "the replay asks another question than the one its human answered"
STOP_NONE = "the replay asks no question where its human answered one"


def head_config(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}}


def asked_at(snapshot) -> list:
    """The questions of the interrupts a thread's head is paused at."""
    return [i.value for i in snapshot.interrupts]


def replay_failed(e: Exception, t: int) -> UnseeError:
    return UnseeError(f"the replay of turn {t} failed ({type(e).__name__}: {e}); its partial branch was erased and "
                      "the thread is as it was. A node that reads something a turn's checkpoint does not record "
                      "(a configurable value that is not a string, number or boolean; a runtime context; a global) "
                      "cannot be replayed: pass it the same way in every turn, or make the graph read it from the state")


def context_of(graph, context) -> dict:
    """The keyword a replayed turn is invoked with for the graph's runtime context, or a refusal."""
    if getattr(graph, "context_schema", None) is not None and context is None:
        raise UnseeError(f"the graph takes a runtime context ({graph.context_schema.__name__}), which LangGraph does not "
                         "checkpoint: pass the context the thread's turns ran with, forget(..., context=...)")
    return {} if context is None else {"context": context}


def prepare_job(thread_id, sources_, method, checkpoint, tuples, pending, rows, reads=None) -> _Job:
    try:
        return _Job.prepare(thread_id, sources_, method, checkpoint, tuples, pending, rows, reads)
    except UnknownSource as e:
        raise UnknownSource(f"{e}. A forget finds a source in each turn's input: its messages and its other keys "
                            "(source_message, source_value, or a place t<turn>.<k> / t<turn>.<key>); a value given in "
                            "the config or the runtime context is no input of the thread and cannot be forgotten") from e
