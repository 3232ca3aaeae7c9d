"""The reference runtime as a Hypothesis state machine; the lemmas are its invariants."""

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from unsee.model import Config, Observation, Part, ReferenceRuntime
from unsee.model.session import locate_source, suffix_closure, taint_closure
from unsee.specs.harness import Tally, check_forget, present_targets
from unsee.specs.statements import diff_layers, require
from unsee.specs.strategies import TARGETS, policies, texts


class ReferenceMachine(RuleBasedStateMachine):
    runtime_class = ReferenceRuntime

    @initialize(policy=policies, sampling=st.booleans(), seed=st.integers(0, 999))
    def start(self, policy, sampling, seed):
        self.factory = lambda: self.runtime_class(Config(sampling=sampling, seed=seed), policy)
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
        """Lemma 2 (i) on the live session, after every rule."""
        if not hasattr(self, "rt"):
            return
        g = self.rt.graph()
        for z in present_targets(self.rt.observations):
            srcs = locate_source(self.rt.session, z)
            cur = taint_closure(g, srcs)
            fast = suffix_closure(self.rt.session.state.artifacts, srcs)  # what B7 uses
            require(fast == cur, f"the one-pass closure of {z} differs from G's: {sorted(fast ^ cur)[:3]}")
            prev = self.closures.get(z, set())
            require(prev <= cur, f"I(z) shrank for {z}: lost {sorted(prev - cur)[:3]}")
            self.closures[z] = cur


TestReferenceMachine = ReferenceMachine.TestCase
TestReferenceMachine.settings = settings(settings.default, stateful_step_count=20)
