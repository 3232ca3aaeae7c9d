"""A Hypothesis state machine for any runtime that implements the protocol.

The kit's `verify` drives whole programs; this machine keeps one runtime alive and
interleaves steps and forgets as Hypothesis chooses. It keeps its own copy of the log and
derives every expectation from the oracle (`unsee.specs.oracle`), never from the runtime's
report: after every forget the live runtime must equal the twin that never saw the forgotten
sources (state, graph, log, receipt, side effects), hold nothing forgotten that the twin
lacks, and have spliced where the oracle says; after every rule its log must be the
machine's and taint must only grow (Lemma 2 (i)).

Subclass it in a test module of your own, as `zarr.testing.stateful` is subclassed for a
store; override `make_runtime` (or set `runtime_class` to a class built as
`runtime_class(Config(sampling=..., seed=...), policy)`):

    from unsee.specs.machine import RuntimeMachine

    class MyRuntimeMachine(RuntimeMachine):
        def make_runtime(self, policy, sampling, seed):
            return MyRuntime({"policy": policy, "sampling": sampling, "seed": seed})

    TestMyRuntime = MyRuntimeMachine.TestCase
    TestMyRuntime.settings = settings(max_examples=50, stateful_step_count=20, deadline=None)

Hooks a subclass may change:

- `make_runtime(policy, sampling, seed)`  a fresh runtime (called for the live one, and for
                                          each fresh run and twin a forget is checked with);
- `policies`                              the checkpoint policies to draw (a runtime whose
                                          policies the oracle does not know sets
                                          `policy_known = False`: its own checkpoint list is
                                          then the only one);
- `methods`                               the forget methods to draw ("B7", "B5");
- `targets`                               the source ids a forget may name.

Rules: `user_turn`, `memory_injection`, `read_only_tool`, `consequential_tool`,
`compaction`, `inject_target` (a target's part, with a span standing instead of it whose
source may be another target, a second part of the same target, or a text a benign source
also carries), and `forget` (B7 at the runtime's choice or at a forced earlier checkpoint,
or B5). A failure is a shrunk sequence of these rules with the statement that broke.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from unsee.model import Config, Observation, Part
from unsee.specs.reference import ReferenceRuntime
from unsee.specs import oracle
from unsee.specs.harness import Tally, check_log, forget_live, present_targets
from unsee.specs.protocol import checked
from unsee.specs.statements import require
from unsee.specs.strategies import POLICIES, TARGETS, texts


class RuntimeMachine(RuleBasedStateMachine):
    """The runtime under test is `make_runtime(policy, sampling, seed)`; by default the
    reference runtime (`runtime_class(Config(...), policy)` for a class with that signature)."""

    runtime_class = ReferenceRuntime
    policies = POLICIES
    policy_known = True
    methods = ("B7", "B5")
    targets = TARGETS
    rt = None  # the live runtime (`checked`), from `start` on

    def make_runtime(self, policy: str, sampling: bool, seed: int):
        return self.runtime_class(Config(sampling=sampling, seed=seed), policy)

    @initialize(data=st.data(), sampling=st.booleans(), seed=st.integers(0, 999))
    def start(self, data, sampling, seed):
        policy = data.draw(st.sampled_from(self.policies), label="policy")
        self.factory = lambda: self.make_runtime(policy, sampling, seed)
        self.policy = policy if self.policy_known else None
        self.rt = checked(self.factory(), "the live runtime")
        self.rt.reset()
        self.log: list[Observation] = []  # the machine's own log: o, minus every forgotten source
        self.forgotten: tuple = ()
        self.history: list[tuple[str, ...]] = []
        self.tally = Tally()
        self.closures: dict[str, set] = {}

    def _step(self, obs: Observation) -> None:
        self.rt.step(obs)
        self.log.append(obs)

    def _part(self, text: str) -> Part:
        return Part(f"s{len(self.log) + 1}.{text.count(' ')}", text)

    @rule(text=texts, reply=st.integers(0, 3))
    def user_turn(self, text, reply):
        self._step(Observation("user", (self._part(text),), reply))

    @rule(text=texts)
    def memory_injection(self, text):
        self._step(Observation("memory", (self._part(text),)))

    @rule(text=texts, reply=st.integers(0, 2))
    def read_only_tool(self, text, reply):
        self._step(Observation("user", (self._part(text),), reply, tool="lookup"))

    @rule(text=texts)
    def consequential_tool(self, text):
        self._step(Observation("user", (self._part(text),), 1, tool="send"))

    @rule(text=texts)
    def compaction(self, text):
        self._step(Observation("user", (self._part(text),), 1, compact=True))

    @rule(data=st.data(), text=texts, kind=st.sampled_from(("user", "memory", "tool")), reply=st.integers(0, 2),
          shape=st.sampled_from(("plain", "instead_of", "two parts", "shared text")))
    def inject_target(self, data, text, kind, reply, shape):
        z = data.draw(st.sampled_from(self.targets), label="target")
        parts = [Part(z, text)]
        if shape == "instead_of":  # a span that stands instead of z, itself from a source a forget may name
            alt = data.draw(st.sampled_from((f"s{len(self.log) + 1}.alt",) + tuple(t for t in self.targets if t != z)))
            parts.append(Part(alt, data.draw(texts), instead_of=z))
        elif shape == "two parts":
            parts.append(Part(z, data.draw(texts)))
        elif shape == "shared text":
            parts.append(self._part(text))
        self._step(Observation(kind, tuple(parts), reply))

    @precondition(lambda self: present_targets(self.log))
    @rule(data=st.data())
    def forget(self, data):
        present = [z for z in present_targets(self.log) if z in self.targets]
        chosen = tuple(sorted(set(data.draw(st.lists(st.sampled_from(present), min_size=1, max_size=2),
                                            label="sources"))))
        method = data.draw(st.sampled_from(self.methods), label="method")
        checkpoint = None
        if method == "B7" and data.draw(st.booleans(), label="force a coarser checkpoint"):
            tau = oracle.first_entry(self.log, chosen)
            before = sorted(b for b in self.rt.checkpoints if b < tau)
            checkpoint = data.draw(st.sampled_from(before), label="checkpoint") if before else None
        self.log, self.forgotten = forget_live(self.rt, self.factory, self.log, chosen, self.tally, method,
                                               checkpoint, self.policy, self.forgotten, self.history,
                                               f"forget {len(self.history) + 1}")
        self.history.append(chosen)
        self.closures.clear()  # a forget rebuilds the suffix; Lemma 2(i) is about execution

    @invariant()
    def log_is_the_machines(self):
        """The runtime's log is the machine's: every observation, without every forgotten source."""
        if self.rt is not None:
            check_log(self.rt, self.log, "after a rule")

    @invariant()
    def taint_is_monotone(self):
        """Lemma 2 (i) on the live runtime's graph(), after every rule (I(z) by the oracle)."""
        if self.rt is None:
            return
        g = self.rt.graph()
        for z in present_targets(self.log):
            cur = oracle.taint_closure(g, (z,))
            prev = self.closures.get(z, set())
            require(prev <= cur, f"I(z) shrank for {z}: lost {sorted(prev - cur)[:3]}")
            self.closures[z] = cur
