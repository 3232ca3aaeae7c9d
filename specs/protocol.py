"""The runtime protocol: what a runtime must expose for the specs to check it.

A runtime is a mutable object holding one session. The specs only ever:

- `reset()`                   go to R_init with an empty log (a fresh session);
- `step(obs)`                 apply F once to one observation (`unsee.model.Observation`);
                              the runtime decides replies, plans, tool calls, compaction;
- `forget(sources, method="B7", checkpoint=None)`
                              forget every source in one operation and return a receipt;
                              method "B5" must be a full reset over o^{-z}; `checkpoint`
                              forces splicing at that earlier boundary c < τ;
- `digest()`                  one digest string per layer of the current state; two states
                              are equal iff every digest is equal (e.g. turn, transcript, kv,
                              memory, summary, plan, environment, ledger, graph);
- `graph()`                   the provenance graph G_t: a networkx DiGraph whose nodes carry
                              `type`, `turn` and `source_ids`; nodes without parents are the
                              recorded observation fields;
- `invocations`               how many times F has run since `reset()`, replays included;
- `observations`              the (sanitized) observation log, one entry per transition;
- `checkpoints`               the boundaries b at which R_b can be restored;
- `world`                     side effects that fired outside the runtime, each with
                              `call_id`, `tool`, `args` and `turn`.

The receipt must carry `tau`, `T`, `checkpoint` (the boundary spliced at), `transitions`
(invocations of F by this forget), `compensation` (side effects the counterfactual run
would not make; see A3) and `replayed` (the sanitized observations fed to F, in order).
Each compensation entry is a mapping {"call_id", "tool", "args" (the counterfactual's
arguments, or None), "committed" (the committed ones, or None), "reason"}, reason one of
"not committed", "counterfactual makes no such call", "arguments differ". Fields a receipt
may carry, and which are then checked: `sources` (the request), `taint` (I(z): node ids of
G_T), `digests` (of the state after the forget, as `digest()`), `deduplicated` (the call
ids recognised as already committed). Every value is checked against `unsee.specs.oracle`
and the twin, never taken from the runtime.

Optional: `layers()` returns layer name → the texts the runtime holds there (transcript,
memory, summaries, plans, stored rows, pages …); after a forget none may hold a forgotten
part's text or source id that the twin's lacks (the privacy statement).

Optional: `trajectory()` returns, after a forget, the digests of every state the splice
went through, R̃_c..R̃_T (c the checkpoint), so that Theorem 1 is checked at every
t ≥ τ−1, not only at T. The cache ("kv") may be left out of all but the last: only R̃_T's
cache is resident. A runtime without it is checked at T only.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

from unsee.model.state import Observation


@runtime_checkable
class Runtime(Protocol):
    def reset(self) -> None: ...

    def step(self, obs: Observation) -> None: ...

    def forget(self, sources: Sequence[str], method: str = "B7", checkpoint: int | None = None) -> Any: ...

    def digest(self) -> Mapping[str, str]: ...

    def graph(self) -> Any: ...

    @property
    def invocations(self) -> int: ...

    @property
    def observations(self) -> Sequence[Observation]: ...

    @property
    def checkpoints(self) -> Sequence[int]: ...

    @property
    def world(self) -> Sequence[Any]: ...


RuntimeFactory = Callable[[], Runtime]
