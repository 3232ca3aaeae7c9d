"""The documentation says what the code does: every command the README shows runs (or, where
it takes minutes, parses against the real CLI), the CLI reference is the commands' own help,
and every relative link points at a file that exists."""

import importlib.util
import json
import re
import shlex
import shutil
from pathlib import Path

import click
import pytest
import typer
from typer.testing import CliRunner

from unsee.impl.cli import app

pytestmark = pytest.mark.tiny  # the README's tour runs on tiny-llama

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SETUP = ("bash scripts/setup.sh && .venv/bin/unsee demo",
         'bash scripts/setup.sh --tests && .venv/bin/python -m pytest -m "not slow" -n 2')
# Commands that take minutes: parsed against the CLI here, run by the tests named.
COSTLY = {
    "unsee prove": "tests/house/test_cli.py, tests/specs/test_proofs.py, tests/specs/test_code_proofs.py",
    "unsee bench": "tests/experiments/test_bench.py, tests/experiments/test_limit.py",
    "unsee audit": "tests/experiments/test_audit.py",
    "unsee soak": "tests/store/test_integrity.py",
}
# Not unsee commands: the kit runs a user's runtime (tests/specs/test_kit.py runs it on the example).
OTHER = {"-m pytest --pyargs unsee.specs.conformance": "tests/specs/test_kit.py"}


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M)


def readme_commands(text: str) -> list[str]:
    """Every command line of the README's bash blocks, continuation lines joined."""
    lines = []
    for block in _blocks(text, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                lines.append(line.strip())
    return lines


def _cli(args: list[str]) -> tuple[click.Command, list[str], list[str]]:
    """The click command that `unsee args…` names, its path and its own arguments."""
    cmd, path = typer.main.get_command(app), ["unsee"]
    args = list(args)
    while hasattr(cmd, "list_commands") and args and not args[0].startswith("-"):
        ctx = click.Context(cmd, info_name=" ".join(path))
        cmd = cmd.get_command(ctx, args[0])
        assert cmd is not None, f"unsee has no command {' '.join(path[1:] + [args[0]])}"
        path.append(args.pop(0))
    return cmd, path, args


def _kit_command_exists(line: str) -> None:
    """The kit's module imports and its pytest plugin (registered under pytest11) takes the options shown."""
    import importlib.metadata

    import unsee.specs.conformance  # noqa: F401
    from unsee.specs import plugin

    (ep,) = [e for e in importlib.metadata.entry_points(group="pytest11") if e.value == "unsee.specs.plugin"]
    source = Path(plugin.__file__).read_text()
    for opt in re.findall(r"(--unsee-[a-z-]+)", line):
        assert f'"{opt}"' in source, f"the kit has no option {opt}"


def test_readme_is_a_short_front_door():
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    assert readme_commands(text)[:2] == list(SETUP)
    assert SETUP[1] in (ROOT / ".ci" / "run").read_text(), "CI runs the README's test command"
    assert "Forgetting Without Restarting: Execution-State Unlearning for Stateful LLM" in " ".join(text.split())
    for word in ("format 1", "used to", "p =", "p-value", "budget"):
        assert word not in text, word
    assert not re.search(r"\b[0-9a-f]{7,40}\b", text), "a commit hash in the README"


def test_every_readme_command_runs(tmp_path, monkeypatch):
    """The tour verbatim (tiny-llama, in a temp dir with the examples); costly commands parse."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    outputs, seen = {}, set()
    for line in readme_commands(README.read_text()):
        if line in SETUP:
            continue
        if any(k in line for k in OTHER):
            _kit_command_exists(line)
            seen.add(line)
            continue
        argv = shlex.split(line)
        assert argv[0] in (".venv/bin/unsee", "unsee"), f"the README shows a command this test does not know: {line}"
        cmd, path, args = _cli(argv[1:])
        name = " ".join(path)
        if any(name.startswith(k) for k in COSTLY):
            cmd.make_context(name, list(args))  # raises on an unknown option or a bad value
        else:
            res = runner.invoke(app, argv[1:])
            assert res.exit_code == 0, f"{line}\n{res.output}"
            outputs[line] = res.output
        seen.add(line)
    assert len(seen) >= 10

    # What the README says about these commands' output.
    demo = next(o for l, o in outputs.items() if " demo" in l)
    assert "5 = T−τ+1 = 10−6+1 transitions" in " ".join(demo.split())
    derived = {x.split(":")[0].strip(): x for x in demo.splitlines() if x.startswith("  ") and ":" in x}
    assert "Wallaby" in derived["observation log"]  # the excerpt is centred on the address
    assert "<|im_start|>" not in derived["memory"]  # tiny-llama's write-back: its own words, no markup
    receipt = json.loads((tmp_path / "receipt.json").read_text())
    assert (receipt["tau"], receipt["T"], receipt["checkpoint"], receipt["transitions"]) == (3, 7, 2, 5)
    assert len(receipt["compensation"]) == 1 and receipt["tokens_restored"] > 0
    assert any("exact=True" in o for l, o in outputs.items() if l.endswith("check --db session.db"))
    before = next(o for l, o in outputs.items() if "--source addr --graph" in l)
    assert "τ=3" in before and "I(z)" in before
    assert (tmp_path / "before.svg").exists() and (tmp_path / "after.svg").exists()


def test_readme_python_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _ = _blocks(README.read_text(), "python")
    exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "agent.db").exists()


def test_readme_langgraph_example_makes_a_prebuilt_agent_forgettable(tmp_path, monkeypatch):
    """The README's LangGraph section, verbatim: LangChain's `create_agent` with its own two tools."""
    monkeypatch.chdir(tmp_path)
    _, code = _blocks(README.read_text(), "python")
    assert len(code.splitlines()) <= 25
    env: dict = {}
    exec(compile(code, "README.md", "exec"), env)
    r = env["receipt"]
    assert (r.tau, r.T, r.checkpoint, r.transitions) == (2, 3, 1, 2)
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("agent.sqlite*"))
    assert b"diabetes" not in stored and b"I need a doctor" in stored
    # the thread is the one a fresh agent gets without "med" (its turn still a turn), K/V included
    import sqlite3

    import torch
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langchain.agents import create_agent

    from unsee.impl.integrations.langgraph.kit import thread_values

    kv = [tuple(t.clone() for t in pair) for pair in env["llm"].context.kv()]
    twin = create_agent(env["llm"], [env["read_only"](env["find_doctor"]), env["booking"]],
                        checkpointer=SqliteSaver(sqlite3.connect(":memory:", check_same_thread=False)))
    for source, text in [("u1", "I need a doctor"), ("med", None), ("u2", "book a visit")]:
        twin.invoke({"messages": [env["source_message"](text, source)] if text else []}, env["config"])
    assert thread_values(twin.get_state(env["config"]).values) == thread_values(env["agent"].get_state(env["config"]).values)
    twin_kv = env["llm"].context.kv()
    assert len(kv) == len(twin_kv) and all(torch.equal(a, b) for p, q in zip(kv, twin_kv) for a, b in zip(p, q))


def _cli_reference():
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "scripts" / "cli_reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cli_reference_is_the_commands_own_help():
    """docs/cli.md regenerated from `--help` is what is committed (python scripts/cli_reference.py)."""
    assert (ROOT / "docs" / "cli.md").read_text() == _cli_reference().render()


def test_the_glossary_defines_every_method_and_policy():
    from unsee.impl.experiments.baselines import METHODS
    from unsee.model.replay import POLICIES

    glossary = (ROOT / "docs" / "glossary.md").read_text()
    for name in METHODS:
        assert f"| {'span excision' if name == 'span' else name} |" in glossary, name
    for name in POLICIES:
        assert f"`{name}`" in glossary, name


@pytest.mark.parametrize("page", ["README.md", "docs/cli.md", "docs/glossary.md", "docs/design.md",
                                  "docs/baselines.md", "docs/langgraph.md", "docs/results/README.md"])
def test_relative_links_point_at_files(page):
    path = ROOT / page
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
        if "://" not in target:
            assert (path.parent / target).exists(), f"{page} links to {target}, which does not exist"


def test_the_demo_shows_each_layer_around_the_address():
    """A layer longer than the excerpt is shown around its first "Wallaby" (the first 200
    characters would hide an address that comes later), and shown whole when it is short."""
    from unsee.impl.experiments.demo import excerpt

    text = "x" * 500 + " 42 Wallaby Way " + "y" * 500
    shown = excerpt(text, "Wallaby")
    assert "Wallaby" in shown and shown.startswith("…") and shown.endswith("…") and len(shown) == 202
    assert excerpt(text[:150], "Wallaby") == text[:150]
    assert excerpt(text, "nowhere") == text[:200] + "…"



def data_path_problems(text: str) -> list[str]:
    """What is wrong with a design page's data path of a forget: it is not the page's first section,
    it is short, or it names a function its link's file does not define."""
    import importlib

    first = re.search(r"^## .*$", text, flags=re.M)
    if first is None or first.group(0) != "## The data path of a forget":
        return ["the page does not open with the data path of a forget"]
    section = text[first.end():text.find("\n## ", first.end())]
    steps = re.findall(r"\[`([\w.]+)`\]\(\.\./([\w/]+\.py)\)", section)
    out = [] if len(steps) >= 20 else [f"only {len(steps)} functions named"]
    for name, path in steps:
        module = "unsee." + path.removesuffix(".py").replace("/", ".")
        if name.startswith("unsee.") and not name.startswith(module + "."):
            out.append(f"{name} is linked to {path}")
            continue
        obj = importlib.import_module(module)
        for part in name.removeprefix(module + ".").split("."):
            obj = getattr(obj, part, None)
        if obj is None or getattr(obj, "__module__", module) != module:
            out.append(f"{name} is not defined in {path}")
    return out


def test_the_design_page_opens_with_the_data_path_of_a_forget_and_every_name_is_in_its_file():
    assert data_path_problems((ROOT / "docs" / "design.md").read_text()) == []


def test_the_data_path_check_names_a_function_the_code_does_not_have():
    good = (ROOT / "docs" / "design.md").read_text()
    bad = good.replace("[`unsee.model.plan.plan_forget`](../model/plan.py)", "[`unsee.model.plan.locate_target`](../model/plan.py)")
    assert bad != good and data_path_problems(bad) == ["unsee.model.plan.locate_target is not defined in model/plan.py"]
    moved = good.replace("[`unsee.model.replay.restore`](../model/replay.py)", "[`unsee.model.replay.restore`](../model/plan.py)")
    assert data_path_problems(moved) == ["unsee.model.replay.restore is linked to model/plan.py"]
