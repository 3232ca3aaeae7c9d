"""The reference runtime as a Hypothesis state machine (`unsee.specs.machine`); the lemmas are
its invariants, and B7's one-pass closure is checked against G's after every rule."""

from hypothesis import settings
from hypothesis.stateful import invariant

from unsee.model.plan import locate_source, suffix_closure, taint_closure
from unsee.specs.harness import present_targets
from unsee.specs.machine import RuntimeMachine
from unsee.specs import oracle
from unsee.specs.statements import require


class ReferenceMachine(RuntimeMachine):
    @invariant()
    def closures_agree(self):
        """G's closure (networkx), the protocol's view of it and the one-pass closure B7 uses."""
        if not hasattr(self, "rt"):
            return
        g = self.rt.graph()
        for z in present_targets(self.rt.observations):
            srcs = locate_source(self.rt.session, z)
            cur = taint_closure(g, srcs)
            fast = suffix_closure(self.rt.session.state.artifacts, srcs)  # what B7 uses
            require(fast == cur, f"the one-pass closure of {z} differs from G's: {sorted(fast ^ cur)[:3]}")
            require(oracle.taint_closure(g, (z,)) == cur, f"graph()'s closure of {z} differs from G's (the oracle's I(z))")


TestReferenceMachine = ReferenceMachine.TestCase
TestReferenceMachine.settings = settings(settings.default, stateful_step_count=20)
