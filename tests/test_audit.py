"""Baselines and audits on a tiny family: measured orderings the paper predicts, and the stats."""

import pytest

from unsee.impl.audit import audit_episode, mcnemar_exact, tost
from unsee.impl.agent import KVRuntime
from unsee.impl.episodes import memory_case
from unsee.model import Config

LEAKY = ("B1", "B2", "B3", "B4", "B6", "B8")


@pytest.fixture(scope="module")
def audited():
    case = memory_case(1, kind="iban", reply=6)
    live = KVRuntime("tiny-llama", Config(summary_tokens=6, plan_tokens=6))
    for o in case.observations:
        live.step(o)
    return audit_episode(live, case, ["B0", *LEAKY, "B7", "B9", "span"], n_tokens=6)


def test_b7_is_identical_to_b5_in_every_cell(audited):
    strip = lambda d: {k: v for k, v in d.items() if k != "transitions"}  # noqa: E731
    assert strip(audited["B7"]) == strip(audited["B5"])
    assert audited["B7"]["transitions"] < audited["B5"]["transitions"]


def test_memory_delete_changes_nothing_an_audit_can_see(audited):
    strip = lambda d: {k: v for k, v in d.items() if k not in ("utility", "transitions")}  # noqa: E731
    assert strip(audited["B1"]) == strip(audited["B0"])


def test_divergence_is_zero_exactly_for_exact_forgets(audited):
    for m in ("B5", "B7", "B9"):
        assert audited[m]["divergence_kl"] == 0.0 and audited[m]["divergence_tv"] == 0.0


@pytest.mark.parametrize("method", LEAKY)
def test_divergence_is_positive_where_influence_remains(audited, method):
    assert audited[method]["divergence_tv"] > 0.0


def test_mcnemar_exact_values():
    assert mcnemar_exact([1, 1, 1, 1, 1, 1], [0] * 6) == pytest.approx(2 / 64)
    assert mcnemar_exact([1, 0], [1, 0]) == 1.0


def test_tost_accepts_identical_and_rejects_shifted():
    assert tost([0.0] * 5, [0.0] * 5, 0.01)["equivalent"]
    assert not tost([0.5, 0.6, 0.55, 0.52], [0.0] * 4, 0.01)["equivalent"]
