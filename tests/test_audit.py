"""Baselines and audits on a tiny family: measured orderings the paper predicts, and the stats."""

import pytest

from unsee.impl.experiments.audit import audit_episode, mcnemar_exact, tost
from unsee.impl.engine.runtime import KVRuntime
from unsee.impl.experiments.cases import memory_case
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
    # every cell but the cost and the samples drawn with per-method seeds
    strip = lambda d: {k: v for k, v in d.items() if k not in ("transitions", "leak_at_5_independent")}  # noqa: E731
    assert strip(audited["B7"]) == strip(audited["B5"])
    assert audited["B7"]["transitions"] < audited["B5"]["transitions"]


def test_memory_delete_changes_nothing_an_audit_can_see(audited):
    strip = lambda d: {k: v for k, v in d.items() if k not in ("utility", "transitions", "leak_at_5_independent")}  # noqa: E731
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


def test_audit_command_on_an_agentdojo_episode(tmp_path):
    pytest.importorskip("agentdojo")
    import json

    from typer.testing import CliRunner

    from unsee.impl.cli import app

    path, md = tmp_path / "a.json", tmp_path / "a.md"
    res = CliRunner().invoke(app, ["audit", "--suite", "agentdojo:banking", "--n", "1", "--tokens", "4",
                                   "--methods", "B0,B1,B3,B7,B8,B9", "--json", str(path), "--markdown", str(md)])
    assert res.exit_code == 0, res.output
    doc = json.loads(path.read_text())
    m = doc["methods"]
    assert doc["tests"]["B7"]["identical_to_B5"] is True
    assert m["B7"]["divergence_kl"] == m["B9"]["divergence_kl"] == 0.0
    assert m["B3"]["divergence_tv"] > 0 and m["B8"]["divergence_tv"] > 0
    strip = lambda d: {k: v for k, v in d.items() if k not in ("transitions", "leak_at_5_independent")}  # noqa: E731
    assert strip(m["B1"]) == strip(m["B0"])  # no memory record held the injection
    assert "Table 4" in md.read_text()
