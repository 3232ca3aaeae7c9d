"""A thread's checkpoints as a trajectory: its turns, their inputs, its boundaries; erasure.

Every `graph.invoke` on a thread is one transition: LangGraph writes an "input" checkpoint
whose pending writes are the invocation's input, then one checkpoint per super-step. R_b (the
state after b turns) is the last checkpoint before turn b+1's input checkpoint; R_0 is the
empty state before the first one. A fork from R_0 starts from a checkpoint id that does not
exist (`ROOT`): LangGraph then starts from the empty state, and the lineage stops there.
"""

from __future__ import annotations

from dataclasses import dataclass

from unsee.model.errors import UnseeError

ROOT = "unsee-root"  # the checkpoint id R_0 stands for: none exists, so a fork from it starts empty


@dataclass(frozen=True)
class Turn:
    """One transition of a thread: its input (channel → value) and the checkpoint it ended at."""

    index: int  # t, 1..T
    input: dict
    end: object  # the CheckpointTuple of R_t


def _id(t) -> str:
    return t.config["configurable"]["checkpoint_id"]


def lineage(saver, thread_id: str) -> list:
    """The head's checkpoints, root first (other branches of the thread left out)."""
    tuples = {_id(t): t for t in saver.list({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})}
    if not tuples:
        return []
    out, cid = [], max(tuples)  # checkpoint ids are time-ordered: the newest is the head
    while cid in tuples:
        t = tuples[cid]
        out.append(t)
        cid = (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    return out[::-1]


def turns(saver, thread_id: str) -> list[Turn]:
    """T turns of the head's lineage, with the input each one was invoked on."""
    line = lineage(saver, thread_id)
    starts = [i for i, t in enumerate(line) if t.metadata.get("source") == "input"]
    out = []
    for k, i in enumerate(starts):
        end = starts[k + 1] - 1 if k + 1 < len(starts) else len(line) - 1
        if end <= i:
            raise UnseeError(f"thread {thread_id!r}: turn {k + 1} was interrupted before its first step; "
                             "finish or discard it (graph.invoke(None, config)) before a forget")
        inp = {ch: v for _task, ch, v in line[i].pending_writes or () if not ch.startswith("branch:")
               and not ch.startswith("__")}
        out.append(Turn(k + 1, inp, line[end]))
    return out


def config_at(thread_id: str, turns_: list[Turn], b: int) -> dict:
    """The config that forks the thread from R_b."""
    cid = ROOT if b == 0 else _id(turns_[b - 1].end)
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": cid}}


def erase_branches(saver, thread_id: str) -> dict:
    """Delete every checkpoint and write of the thread off the head's lineage, with
    secure_delete on; then VACUUM and truncate the WAL, so the freed pages leave the file."""
    keep = {_id(t) for t in lineage(saver, thread_id)}
    with saver.lock:
        conn = saver.conn
        conn.commit()
        conn.execute("PRAGMA secure_delete = ON")
        counts = {}
        for table in ("checkpoints", "writes"):
            ids = {r[0] for r in conn.execute(f"SELECT DISTINCT checkpoint_id FROM {table} WHERE thread_id = ?",
                                              (thread_id,))}
            drop, n = sorted(ids - keep), 0
            for i in range(0, len(drop), 500):
                chunk = drop[i:i + 500]
                n += conn.execute(f"DELETE FROM {table} WHERE thread_id = ? AND checkpoint_id IN "
                                  f"({','.join('?' * len(chunk))})", (thread_id, *chunk)).rowcount
            counts[table] = n
        conn.commit()
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return {"checkpoints_deleted": counts["checkpoints"], "writes_deleted": counts["writes"]}
