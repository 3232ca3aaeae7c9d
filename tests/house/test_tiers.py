"""Every test sits in exactly one tier, marked in its own file (see conftest.py)."""

import pytest

from tests.conftest import TIERS


def tier_problems(items) -> list[str]:
    """The items with no tier or with more than one (a module's `pytestmark` and a test's own
    mark both count)."""
    out = []
    for item in items:
        got = sorted({m.name for m in item.iter_markers() if m.name in TIERS})
        if len(got) != 1:
            out.append(f"{item.nodeid}: {got or 'no tier'}")
    return out


def test_every_collected_test_has_exactly_one_tier(request):
    """Over the tests of this run (the whole suite in CI)."""
    assert not tier_problems(request.session.items)


class _Item:
    def __init__(self, nodeid, *marks):
        self.nodeid, self.marks = nodeid, [getattr(pytest.mark, m).mark for m in marks]

    def iter_markers(self):
        return iter(self.marks)


def test_the_tier_check_sees_a_test_in_two_tiers_and_one_in_none():
    items = [_Item("a", "tiny"), _Item("b", "tiny", "slow"), _Item("c", "parametrize"), _Item("d", "heavy")]
    assert tier_problems(items) == ["b: ['slow', 'tiny']", "c: no tier"]


def test_ci_has_every_extra_that_tests_skip_without():
    """Tests skip when an optional extra is missing (agentdojo, langgraph with langchain, ray);
    `.ci/run` sets UNSEE_REQUIRE_EXTRAS, so there a missing extra fails here instead of skipping."""
    import importlib
    import os

    if not os.environ.get("UNSEE_REQUIRE_EXTRAS"):  # a developer's venv may lack an extra; CI's may not
        pytest.skip("checked where UNSEE_REQUIRE_EXTRAS is set (.ci/run)")
    for name in ("agentdojo", "langgraph", "langchain_core", "langchain.agents", "ray"):
        importlib.import_module(name)
