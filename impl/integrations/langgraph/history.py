"""A thread's checkpoints as a trajectory: its turns, their inputs, its boundaries; erasure.

Every `graph.invoke` (or `ainvoke`, `stream`, `astream`, one input of `batch`/`abatch`) on a
thread is one transition: LangGraph writes an "input" checkpoint whose pending writes are the
invocation's input, then one checkpoint per super-step. R_b (the state after b turns) is the last
checkpoint before turn b+1's input checkpoint; R_0 is the empty state before the first one. A
fork from R_0 starts from a checkpoint id that does not exist (`ROOT`): LangGraph then starts
from the empty state, and the lineage stops there.

A thread is read through the checkpointer's own `list`/`alist`, so this works on every
checkpointer; `check_history` refuses, before anything is written, a thread whose checkpoints are
not a sequence of whole turns (see it). Erasure goes through the checkpointer's adapter
(`savers`).
"""

from __future__ import annotations

from dataclasses import dataclass

from unsee.model.errors import UnseeError

ROOT = "unsee-root"  # the checkpoint id R_0 stands for: none exists, so a fork from it starts empty
INTERRUPT, RESUME, ERROR = "__interrupt__", "__resume__", "__error__"


NULL_TASK = "00000000-0000-0000-0000-000000000000"  # the task id LangGraph writes an invocation's resume under
NO_RESUME = object()
EDIT = object()  # turns_of's mark of an update turn's start
UPDATE = "unsee_update"  # the metadata key a forgettable graph's update_state records its as_node under ("": none)


@dataclass(frozen=True)
class Turn:
    """One transition of a thread: its input (channel → value) and the checkpoint it ended at. A
    resume (`invoke(Command(resume=v))` on a thread paused at an `interrupt()`) is a turn of its
    own: its input is the answer `v`, and it starts at the checkpoint the thread paused at."""

    index: int  # t, 1..T
    input: dict
    end: object  # the CheckpointTuple of R_t
    start: object = None  # the input checkpoint (a resume: the checkpoint it resumed)
    after: object = None  # the first checkpoint after the input was applied (None: the turn had no step)
    resume: object = NO_RESUME  # a resume turn's answer
    first: int = 0  # the place in the lineage of the first checkpoint the turn wrote
    as_node: str | None = None  # an update turn (`update_state`): the node it was made as ("" for None)

    @property
    def resumed(self) -> bool:
        return self.resume is not NO_RESUME

    @property
    def updated(self) -> bool:
        return self.as_node is not None


def checkpoint_id(t) -> str:
    return t.config["configurable"]["checkpoint_id"]


def _ns(t) -> str:
    return t.config["configurable"].get("checkpoint_ns", "")


def all_checkpoints(saver, thread_id: str) -> list:
    """Every checkpoint of the thread, every namespace."""
    return list(saver.list({"configurable": {"thread_id": thread_id}}))


async def aall_checkpoints(saver, thread_id: str) -> list:
    return [t async for t in saver.alist({"configurable": {"thread_id": thread_id}})]


def line_of(tuples) -> list:
    """The head's checkpoints (namespace ''), root first (other branches left out)."""
    by_id = {checkpoint_id(t): t for t in tuples if _ns(t) == ""}
    if not by_id:
        return []
    out, cid = [], max(by_id)  # checkpoint ids are time-ordered: the newest is the head
    while cid in by_id:
        t = by_id[cid]
        out.append(t)
        cid = (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    return out[::-1]


def lineage(saver, thread_id: str) -> list:
    """The head's checkpoints, root first (other branches of the thread left out)."""
    return line_of(list(saver.list({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})))


async def alineage(saver, thread_id: str) -> list:
    return line_of([t async for t in saver.alist({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})])


def resumes(t) -> list:
    """The answers a checkpoint was resumed with (one per `Command(resume=...)` invocation)."""
    return [v for task, ch, v in t.pending_writes or () if ch == RESUME and task == NULL_TASK]


def interrupts(t) -> list:
    """The values of the interrupts pending at a checkpoint (the questions a human was asked)."""
    out = []
    for _task, ch, v in t.pending_writes or ():
        if ch == INTERRUPT:
            out += [getattr(i, "value", i) for i in (v if isinstance(v, (list, tuple)) else [v])]
    return out


def turns_of(line, thread_id: str) -> list[Turn]:
    """T turns of a lineage, with the input each one was invoked on: each "input" checkpoint
    starts a turn, and so does each resume of a checkpoint paused at an interrupt."""
    starts = []  # (place in the lineage, the resume's answer or NO_RESUME)
    for i, t in enumerate(line):
        if t.metadata.get("source") == "input":
            starts.append((i, NO_RESUME))
        for v in resumes(t):
            starts.append((i, v))
        if t.metadata.get("source") == "update":
            starts.append((i, EDIT))
    out = []
    for k, (i, answer) in enumerate(starts):
        if answer is EDIT:  # an edit: its values are the writes on the checkpoint before it
            inp = {ch: v for _task, ch, v in line[i - 1].pending_writes or () if not ch.startswith("branch:")
                   and not ch.startswith("__")}
            out.append(Turn(k + 1, inp, line[i], line[i], line[i], NO_RESUME, i, line[i].metadata[UPDATE]))
            continue
        resumed = answer is not NO_RESUME
        nxt_resumes = k + 1 < len(starts) and starts[k + 1][1] is not NO_RESUME and starts[k + 1][1] is not EDIT
        if k + 1 < len(starts):  # a resume starts where the turn before it paused
            end = starts[k + 1][0] if nxt_resumes else starts[k + 1][0] - 1
        else:
            end = len(line) - 1
        if end <= i:
            if resumed or nxt_resumes:
                raise UnseeError(f"thread {thread_id!r}: turn {k + 1} paused at an interrupt() before it wrote a checkpoint "
                                 "(in the turn's first step, or again at once after a resume); a forget cannot tell "
                                 "the turn's input from its answer there: ask in a later step of the turn")
            raise UnseeError(f"thread {thread_id!r}: turn {k + 1} was interrupted before its first step; "
                             "finish or discard it (graph.invoke(None, config)) before a forget")
        if resumed:
            out.append(Turn(k + 1, {}, line[end], line[i], line[i + 1], answer, i + 1))
        else:
            inp = {ch: v for _task, ch, v in line[i].pending_writes or () if not ch.startswith("branch:")
                   and not ch.startswith("__")}
            out.append(Turn(k + 1, inp, line[end], line[i], line[i + 1], NO_RESUME, i))
    return out


def turns(saver, thread_id: str) -> list[Turn]:
    """T turns of the head's lineage, with the input each one was invoked on."""
    return turns_of(lineage(saver, thread_id), thread_id)


async def aturns(saver, thread_id: str) -> list[Turn]:
    return turns_of(await alineage(saver, thread_id), thread_id)


def check_history(tuples, thread_id: str, pending: tuple = ()) -> list:
    """The head's lineage of a thread a forget can replay, or an error that says why not: a thread
    not checkpointed at every step (durability="exit"), a state changed by `update_state` rather
    than by a turn, several interrupts pending at once, a failed step anywhere on the lineage, or a
    last turn that has not finished (`pending`: the head's next nodes, `graph.get_state(config).next`)
    other than by pausing at an `interrupt()`."""
    fixed = sorted({_ns(t) for t in tuples if _ns(t) and any(":" not in part for part in _ns(t).split("|"))})
    if fixed:
        raise UnseeError(f"thread {thread_id!r} has checkpoints of a subgraph compiled with checkpointer=True (namespace "
                         f"{fixed[0]!r}): it keeps its own state from turn to turn, which a fork of the parent does "
                         "not take back; compile the subgraph with the default checkpointer (None) or False")
    line = line_of(tuples)
    if not line:
        raise UnseeError(f"thread {thread_id!r} has no checkpoints in this graph's checkpointer")
    for prev, t in zip([None] + line[:-1], line):
        source, step = t.metadata.get("source"), t.metadata.get("step")
        if prev is None and source == "update":
            raise UnseeError(f"thread {thread_id!r} starts with an edit (update_state before its first input); a "
                             "forget replays edits of a thread that has run: give the first values as its first input")
        if prev is not None and prev.metadata.get("source") == "update" and source == "loop":
            raise UnseeError(f"thread {thread_id!r}: checkpoint {checkpoint_id(t)} continues an edit (invoke(None) after "
                             "update_state); a forget replays an edit and the invocations given an input, not a run "
                             "continued from an edit: give the next input instead of None")
        writes = t.pending_writes or ()
        if any(task == NULL_TASK and ch != RESUME for task, ch, _v in writes):
            raise UnseeError(f"thread {thread_id!r}: checkpoint {checkpoint_id(t)} was changed by a Command's update or goto "
                             "(invoke(Command(update=...)) or Command(resume=..., update=...)); a forget replays inputs, "
                             "answers and edits: make the change with update_state, or answer with Command(resume=...) alone")
        if any(ch == RESUME for _task, ch, _v in writes) and not resumes(t):
            raise UnseeError(f"thread {thread_id!r}: checkpoint {checkpoint_id(t)} was resumed by interrupt id "
                             "(Command(resume={id: value})); a forget replays one answer per resume, matched by its "
                             "question: resume with Command(resume=value)")
        if source == "update" and UPDATE not in t.metadata:
            raise UnseeError(f"thread {thread_id!r}: checkpoint {checkpoint_id(t)} was written by an edit whose node is "
                             "not recorded (update_state on a graph not made forgettable, or bulk_update_state); make "
                             "the graph forgettable(graph) before its threads are edited, edit with update_state, and a "
                             "forget replays the edits")
        if source == "update" and prev is not None and interrupts(prev) and not resumes(prev):
            raise UnseeError(f"thread {thread_id!r}: checkpoint {checkpoint_id(t)} edits a thread paused at an interrupt "
                             "(update_state before the resume); a forget replays edits of a thread at rest only: answer "
                             "the interrupt with the edit instead (Command(resume=...))")
        if source not in ("input", "loop", "update"):
            raise UnseeError(f"thread {thread_id!r}: checkpoint {checkpoint_id(t)} was written by {source!r} "
                             "(a fork), not by a turn; a forget replays the thread's invocations and would lose "
                             "that change: it cannot forget on this thread")
        want = -1 if prev is None else prev.metadata.get("step", 0) + 1
        if step != want or (prev is None and source != "input"):
            raise UnseeError(f"thread {thread_id!r} was not checkpointed at every step (run with "
                             "durability='exit'?): its turns cannot be told apart; run the graph with "
                             "durability='async' (the default) or 'sync'")
        if len(interrupts(t)) > 1:
            raise UnseeError(f"thread {thread_id!r}: several interrupts were pending at once at checkpoint "
                             f"{checkpoint_id(t)} (parallel nodes each asking); a forget replays one answer per "
                             "resume and cannot match them to the replay's interrupts: ask one question at a time")
        for _task, ch, _v in t.pending_writes or ():
            if ch == ERROR:
                raise UnseeError(f"thread {thread_id!r}: a step failed at checkpoint {checkpoint_id(t)} and its turn did not "
                                 "finish; a forget replays whole turns only")
    if pending and not (interrupts(line[-1]) and not resumes(line[-1])):  # paused at an interrupt: a turn's end
        raise UnseeError(f"thread {thread_id!r}: its last turn has not finished (next: {list(pending)}); finish it "
                         "(graph.invoke(None, config)) before a forget")
    return line


def kept_with_subgraphs(tuples, line) -> set[tuple[str, str]]:
    """The checkpoints a thread keeps, as (namespace, id): the head's lineage, and every subgraph
    checkpoint (another namespace) written under one of its checkpoints (its metadata's `parents`)."""
    ids = {checkpoint_id(t) for t in line}
    return {("", c) for c in ids} | {(_ns(t), checkpoint_id(t)) for t in tuples if _ns(t) != ""
                                     and (t.metadata.get("parents") or {}).get("") in ids}


def subgraph_checkpoints(tuples, line) -> list:
    """The subgraph checkpoints (other namespaces) written under the head's lineage, oldest first."""
    ids = {checkpoint_id(t) for t in line}
    return sorted((t for t in tuples if _ns(t) != "" and (t.metadata.get("parents") or {}).get("") in ids),
                  key=checkpoint_id)


def config_at(thread_id: str, turns_: list[Turn], b: int) -> dict:
    """The config that forks the thread from R_b."""
    cid = ROOT if b == 0 else checkpoint_id(turns_[b - 1].end)
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": cid}}


def erase_branches(saver, thread_id: str) -> dict:
    """Delete every checkpoint and write of the thread off the head's lineage, through the
    checkpointer's adapter (`savers`): no byte of them stays in its storage."""
    from unsee.impl.integrations.langgraph.checkpointers import adapter

    return adapter(saver).erase(thread_id, kept_with_subgraphs(all_checkpoints(saver, thread_id), lineage(saver, thread_id)))


async def aerase_branches(saver, thread_id: str) -> dict:
    from unsee.impl.integrations.langgraph.checkpointers import adapter

    return await adapter(saver).aerase(thread_id, kept_with_subgraphs(await aall_checkpoints(saver, thread_id),
                                                                        await alineage(saver, thread_id)))
