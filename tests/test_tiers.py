"""Every test sits in one tier (see conftest.py)."""

from tests.conftest import HEAVY


def test_tier_names_exist():
    """The HEAVY list names tests that exist (a renamed test must not drop out of its tier)."""
    import ast
    from pathlib import Path

    here = Path(__file__).parent
    for name in HEAVY:
        f, fn = name.split("::")
        defs = {n.name for n in ast.walk(ast.parse((here / f).read_text())) if isinstance(n, ast.FunctionDef)}
        assert fn in defs, name


def test_every_collected_test_has_one_tier(request):
    tiers = ("fast", "tiny", "heavy", "slow", "gpu")
    for item in request.session.items:
        got = [m for m in tiers if item.get_closest_marker(m)]
        assert got, f"{item.nodeid} has no tier"
