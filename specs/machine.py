"""A Hypothesis state machine for any runtime that implements the protocol.

The kit's `verify` drives whole programs and replays each forget on fresh runtimes; this
machine keeps one runtime alive and interleaves steps and forgets as Hypothesis chooses,
checking after every forget that the live runtime equals the twin that never saw the
forgotten sources, and after every rule that taint only grows (Lemma 2 (i)). Use it in a
test module of your own:

    from unsee.specs.machine import RuntimeMachine

    class MyRuntimeMachine(RuntimeMachine):
        def make_runtime(self, policy, sampling, seed):
            return MyRuntime({"policy": policy, "sampling": sampling, "seed": seed})

    TestMyRuntime = MyRuntimeMachine.TestCase

A failure is a shrunk sequence of rules (`start`, `user_turn`, `inject_target`, `forget`, …)
that reproduces it, with the statement that broke.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from unsee.model import Config, Observation, Part, ReferenceRuntime
from unsee.specs.harness import Tally, check_forget, present_targets
from unsee.specs.statements import diff_layers, graph_closure, require
from unsee.specs.strategies import TARGETS, policies, texts


class RuntimeMachine(RuleBasedStateMachine):
    """The runtime under test is `make_runtime(policy, sampling, seed)`; by default the
    reference runtime (`runtime_class(Config(...), policy)` for a class with that signature)."""

    runtime_class = ReferenceRuntime

    def make_runtime(self, policy: str, sampling: bool, seed: int):
        return self.runtime_class(Config(sampling=sampling, seed=seed), policy)

    @initialize(policy=policies, sampling=st.booleans(), seed=st.integers(0, 999))
    def start(self, policy, sampling, seed):
        self.factory = lambda: self.make_runtime(policy, sampling, seed)
        self.rt = self.factory()
        self.n = 0
        self.tally = Tally()
        self.closures: dict[str, set] = {}

    def _step(self, kind, text, reply=0, tool=None, compact=False, source=None):
        self.n += 1
        self.rt.step(Observation(kind, (Part(source or f"s{self.n}", text),), reply, tool, compact))

    @rule(text=texts, reply=st.integers(0, 3))
    def user_turn(self, text, reply):
        self._step("user", text, reply)

    @rule(text=texts)
    def memory_injection(self, text):
        self._step("memory", text)

    @rule(text=texts, reply=st.integers(0, 2))
    def read_only_tool(self, text, reply):
        self._step("user", text, reply, tool="lookup")

    @rule(text=texts)
    def consequential_tool(self, text):
        self._step("user", text, 1, tool="send")

    @rule(text=texts)
    def compaction(self, text):
        self._step("user", text, 1, compact=True)

    @rule(z=st.sampled_from(TARGETS), text=texts, kind=st.sampled_from(("user", "memory", "tool")),
          reply=st.integers(0, 2))
    def inject_target(self, z, text, kind, reply):
        self._step(kind, text, reply, source=z)

    @precondition(lambda self: present_targets(self.rt.observations))
    @rule(data=st.data())
    def forget(self, data):
        present = present_targets(self.rt.observations)
        chosen = tuple(sorted(set(data.draw(st.lists(st.sampled_from(present), min_size=1, max_size=2)))))
        ob = check_forget(self.factory, tuple(self.rt.observations), chosen, self.tally)
        self.rt.forget(list(chosen))
        d = diff_layers(dict(self.rt.digest()), ob.twin[-1])
        require(not d, f"live runtime differs from R^-z_T in {d}")
        self.closures.clear()  # a forget rebuilds the suffix; Lemma 2(i) is about execution

    @invariant()
    def taint_is_monotone(self):
        """Lemma 2 (i) on the live runtime's graph(), after every rule."""
        if not hasattr(self, "rt"):
            return
        g = self.rt.graph()
        for z in present_targets(self.rt.observations):
            cur = graph_closure(g, (z,))
            prev = self.closures.get(z, set())
            require(prev <= cur, f"I(z) shrank for {z}: lost {sorted(prev - cur)[:3]}")
            self.closures[z] = cur
