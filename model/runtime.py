"""The reference model behind the runtime protocol of `unsee.specs.protocol`."""

from __future__ import annotations

from unsee.model.session import (
    Receipt, Session, UnseeError, append, full_reset, new_session, provenance_graph, selective_replay,
)
from dataclasses import replace

from unsee.model.lm import REFERENCE
from unsee.model.state import Config, Meter, Observation, layer_digests


class ReferenceRuntime:
    """A mutable handle on an immutable `Session`; every transition is `step`."""

    name = "reference"

    def __init__(self, config: Config = Config(), policy: str = "every", model=None) -> None:
        self.config = config
        self.policy = policy
        self.model = model if model is not None else REFERENCE
        self.reset()

    def reset(self) -> None:
        self.session = new_session(self.config, self.policy, self.model)
        self._meter = Meter()
        self._last_checkpoint: int | None = None  # the splice point of the last forget

    @property
    def session(self) -> Session:
        return self._session

    @session.setter
    def session(self, s: Session) -> None:
        # a session always runs on this runtime's θ and cache, even when it came from elsewhere
        self._session = s if s.lm is self.model else replace(s, lm=self.model)

    def step(self, obs: Observation, hints=None) -> None:
        """One transition. `hints`: replies to try as drafts (`unsee.model.state.step`); the
        result is the same with or without them, only the decoding it takes differs."""
        self.session, _ = append(self.session, obs, self._meter, hints=hints)

    def forget(self, sources, method: str = "B7", checkpoint: int | None = None) -> Receipt:
        if method == "B7":
            self.session, receipt = selective_replay(self.session, sources, checkpoint)
        elif method in ("B5", "B5'"):
            self.session, receipt = full_reset(self.session, sources, prefix_cache=method == "B5'")
        else:
            raise ValueError(f"method {method!r} is not B7, B5 or B5'")
        self._meter.transitions += receipt.transitions
        self._last_checkpoint = receipt.checkpoint
        return receipt

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
        return self._meter.transitions

    @property
    def observations(self) -> tuple[Observation, ...]:
        return self.session.observations

    @property
    def checkpoints(self) -> tuple[int, ...]:
        return tuple(c.boundary for c in self.session.checkpoints)

    @property
    def world(self):
        return self.session.world
