"""The command line's JSON contracts."""

import json

import pytest
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
    assert doc["engine"] == "reference" and doc["examples"] == 30 + doc["directed"] and doc["directed"] == 76
    assert all(v["forgets"] > 0 for v in doc["targets"].values())
    assert doc["failures"] == [] and doc["exact"] == doc["forgets"] == doc["optimal_invocations"] > 0
    assert "tau == 1" in doc["coverage"] or "1 < tau < T" in doc["coverage"]


def test_verify_rejects_unknown_engine():
    res = runner.invoke(app, ["verify", "--engine", "nope"])
    assert res.exit_code != 0
    assert res.exit_code == 2 and "is not one of" in res.output and "'reference'" in res.output


@pytest.mark.tiny  # audits tiny-llama in a subprocess
def test_off_a_terminal_long_commands_print_progress_lines(tmp_path):
    """In a log or CI, rich draws no bar until the end; the commands print plain lines instead
    (the audit one per episode, with the episodes its journal gave back marked)."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "unsee.impl.cli", "audit", "--model", "tiny-llama", "--suite", "memory", "--n", "2",
           "--tokens", "2", "--methods", "B0,B7", "--journal", str(tmp_path / "j.jsonl")]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    lines = [x for x in first.stderr.splitlines() if x.startswith("audit memory-")]
    assert len(lines) >= 2 and all(x.endswith(" s)") for x in lines[:2])
    assert "1/2" in lines[0] and "2/2" in lines[1] and "journal" not in lines[0]
    again = subprocess.run(cmd + ["--json", str(tmp_path / "a.json")], capture_output=True, text=True, timeout=600)
    assert "audit memory-address-0 (from the journal) 1/2" in again.stderr
    assert "0 episodes run" in again.stdout
    doc = json.loads((tmp_path / "a.json").read_text())  # the rows are the journal's, the JSON the summary
    assert "per_episode" not in doc and doc["per_episode_in"] == str(tmp_path / "j.jsonl") and doc["methods"]["B7"]


def command_summaries() -> dict[str, str]:
    """Each command's summary as `unsee --help` lists it: the first paragraph of its help."""
    import typer

    group = typer.main.get_command(app)
    out = {}
    for name, cmd in group.commands.items():
        subs = getattr(cmd, "commands", {})
        for sub, c in [(name, cmd)] + [(f"{name} {k}", v) for k, v in subs.items()]:
            out[sub] = (c.help or "").strip().split("\n\n")[0]
    return out


def test_every_command_summary_is_one_sentence_on_one_line():
    """`unsee --help` lists each command by the first paragraph of its help: a summary that runs
    over lines is cut mid-sentence there, so each is one line that ends a sentence."""
    summaries = command_summaries()
    assert {"prove", "run", "forget", "check", "show", "soak", "bench cost-law"} <= set(summaries)
    broken = {k: v for k, v in summaries.items() if "\n" in v or not v.endswith(".")}
    assert not broken, broken
