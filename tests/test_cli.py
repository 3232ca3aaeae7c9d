"""The command line's JSON contracts."""

import json

from typer.testing import CliRunner

from unsee.impl.cli import app

runner = CliRunner()


def test_prove_writes_all_proved(tmp_path):
    path = tmp_path / "p.json"
    res = runner.invoke(app, ["prove", "--max-steps", "6", "--json", str(path)])
    assert res.exit_code == 0, res.output
    doc = json.loads(path.read_text())
    assert doc["all_proved"] is True and len(doc["obligations"]) >= 10


def test_verify_reference_reports_counts(tmp_path):
    path = tmp_path / "v.json"
    res = runner.invoke(app, ["verify", "--engine", "reference", "--examples", "30", "--seed", "3",
                              "--json", str(path)])
    assert res.exit_code == 0, res.output
    doc = json.loads(path.read_text())
    assert doc["engine"] == "reference" and doc["examples"] == 30
    assert doc["failures"] == [] and doc["exact"] == doc["forgets"] == doc["optimal_invocations"] > 0
    assert "tau == 1" in doc["coverage"] or "1 < tau < T" in doc["coverage"]


def test_verify_rejects_unknown_engine():
    res = runner.invoke(app, ["verify", "--engine", "nope"])
    assert res.exit_code != 0
    assert res.exit_code == 2 and "is not one of" in res.output and "'reference'" in res.output
