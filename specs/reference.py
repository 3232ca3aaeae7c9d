"""The runtime protocol of `unsee.specs.protocol` over the reference transition system.

`ReferenceRuntime` is a mutable handle on an immutable `unsee.model.replay.Session`: a step is one
invocation of F, a forget is Algorithm 1 (B7) or a full reset (B5). It is the kit's reference and
the base of its mutants. An engine runs it with its own F (`transition`: the same states, with the
engine's fast paths and bookkeeping; see `unsee.impl.engine.metered`).
"""

from __future__ import annotations

from dataclasses import replace

from unsee.model.errors import UnseeError
from unsee.model.lm import REFERENCE
from unsee.model.plan import provenance_graph
from unsee.model.receipt import Receipt
from unsee.model.replay import Session, Transition, append, full_reset, new_session, selective_replay
from unsee.model.state import Config, Observation, layer_digests

METHODS = ("B7", "B5", "B5'")


class ReferenceRuntime:
    """The protocol over a `Session` on θ = `model`; F is `transition` (the session's `step` when None)."""

    name = "reference"

    def __init__(self, config: Config = Config(), policy: str = "every", model=None,
                 transition: Transition | None = None) -> None:
        self.config = config
        self.policy = policy
        self.model = model if model is not None else REFERENCE
        self.transition = transition
        self.reset()

    def reset(self) -> None:
        self.session = new_session(self.config, self.policy, self.model)
        self._invocations = 0
        self._last_checkpoint: int | None = None  # the splice point of the last forget

    @property
    def session(self) -> Session:
        return self._session

    @session.setter
    def session(self, s: Session) -> None:
        # a session always runs on this runtime's θ and cache, even when it came from elsewhere
        self._session = s if s.lm is self.model else replace(s, lm=self.model)

    def step(self, obs: Observation) -> None:
        """One transition."""
        self.session, _ = append(self.session, obs, self.transition)
        self._invocations += 1

    def forget(self, sources, method: str = "B7", checkpoint: int | None = None) -> Receipt:
        if method == "B7":
            self.session, receipt = selective_replay(self.session, sources, checkpoint, self.transition)
        elif method in ("B5", "B5'"):  # B5′ is B5 with an engine's prefix cache: the same F, the same states
            self.session, receipt = full_reset(self.session, sources, self.transition, method=method)
        else:
            raise ValueError(f"method {method!r} is not one of {METHODS}")
        self.forgot(receipt)
        return receipt

    def forgot(self, receipt: Receipt) -> None:
        """Account for a forget that left this runtime's session (its invocations, its splice point)."""
        self._invocations += receipt.transitions
        self._last_checkpoint = receipt.checkpoint

    def digest(self) -> dict[str, str]:
        return layer_digests(self.session.state, self.model)

    def trajectory(self) -> list[dict[str, str]]:
        """Digests of R̃_c..R̃_T after the last forget (c its checkpoint), the cache layer only
        for R̃_T, whose cache alone is resident (see specs.protocol)."""
        c = self._last_checkpoint
        if c is None:
            raise UnseeError("no forget has run on this session yet: there is no spliced trajectory")
        s = self.session
        out = [{k: v for k, v in layer_digests(replace(r, kv=()), REFERENCE).items() if k != "kv"}
               for r in s.states[c:-1]]
        return out + [self.digest()]

    def graph(self):
        return provenance_graph(self.session.state)

    @property
    def invocations(self) -> int:
        return self._invocations

    @property
    def observations(self) -> tuple[Observation, ...]:
        return self.session.observations

    @property
    def checkpoints(self) -> tuple[int, ...]:
        return tuple(c.boundary for c in self.session.checkpoints)

    @property
    def world(self):
        return self.session.world
