"""The conformance kit bites: the example runtime passes, every mutant fails with a trace."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from unsee.specs.runtimes import MUTANT_FACTORIES
from unsee.specs.vectors import generate, load_vectors

ROOT = Path(__file__).resolve().parents[2]


def kit(runtime: str, cwd: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The kit's default run (100 sessions, one in five up to 40 observations) on `runtime`
    (`env`: the whole environment, else this one's)."""
    return subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "unsee.specs.conformance",
                           f"--unsee-runtime={runtime}", "-p", "no:cacheprovider",
                           "-q", *extra], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**(os.environ if env is None else env), "PYTHONPATH": str(cwd)})


@pytest.mark.heavy
def test_example_runtime_passes_the_kit():
    p = kit("tiny_runtime:TinyRuntime", ROOT / "docs" / "examples")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 passed" in p.stdout
    assert "unsee kit: 176 sessions (76 directed, 100 random; profile default)" in p.stdout
    assert "several targets with different tau" in p.stdout


def test_reference_passes_the_default_run_with_a_coverage_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_STORAGE_DIRECTORY"}
    p = kit("unsee.specs.runtimes:reference", run, env={**env, "UNSEE_CACHE_DIR": str(tmp_path / "cache")})
    assert p.returncode == 0, p.stdout + p.stderr
    # nothing of Hypothesis' or pytest-benchmark's is left in the folder the kit ran from: they
    # went to unsee's cache
    assert not {".hypothesis", ".benchmarks"} & {x.name for x in run.iterdir()}
    line = next(x for x in p.stdout.splitlines() if x.startswith("unsee kit:"))
    for scenario in ("method B5", "checkpoint forced", "session longer than 12 observations", "instead_of parts",
                     "several targets with different tau", "forget after an earlier forget"):
        assert scenario in line, line
    targets = next(x for x in p.stdout.splitlines() if x.startswith("unsee kit: coverage targets"))
    for target in ("compaction right before tau", "policy has no checkpoint at tau-1", "target inside an instead_of part",
                   "z1, then z2, then z1 again"):
        assert target in targets and f"{target}: 0 (" not in targets, targets


def test_a_kit_run_points_hypothesis_at_unsees_cache(tmp_path, monkeypatch):
    """What Hypothesis writes in a kit run (its example database; the constants it caches from source
    files outside site-packages, so only for an editable install) goes under unsee's cache."""
    from types import SimpleNamespace

    from hypothesis.configuration import set_hypothesis_home_dir, storage_directory

    from unsee.specs import plugin

    before = storage_directory(intent_to_write=False).home_directory
    monkeypatch.setenv("UNSEE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HYPOTHESIS_STORAGE_DIRECTORY", raising=False)
    config = SimpleNamespace(getoption=lambda name, default=None: "m:f" if name == "--unsee-runtime" else default,
                             option=SimpleNamespace())
    try:
        plugin.pytest_configure(config)
        assert storage_directory("examples", intent_to_write=False).home_directory == tmp_path / "cache" / "kit" / "hypothesis"
    finally:
        set_hypothesis_home_dir(before)


def test_a_runtime_that_raises_is_named_with_a_runnable_trace(tmp_path):
    (tmp_path / "raising.py").write_text(
        "from unsee.model import Config\nfrom unsee.specs.reference import ReferenceRuntime\n"
        "class Raising(ReferenceRuntime):\n"
        "    def forget(self, sources, method='B7', checkpoint=None):\n"
        "        if method == 'B5':\n"
        "            raise NotImplementedError('B5 is not supported')\n"
        "        return super().forget(sources, method, checkpoint)\n"
        "def make(cfg):\n"
        "    return Raising(Config(sampling=cfg['sampling'], seed=cfg['seed']), cfg['policy'])\n")
    p = kit("raising:make", tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "the runtime raised NotImplementedError: B5 is not supported" in p.stdout
    assert "ExceptionGroup" not in p.stdout
    assert "from unsee.model import Observation, Part" in p.stdout and "method='B5'" in p.stdout


@pytest.mark.heavy
@pytest.mark.parametrize("mutant", MUTANT_FACTORIES)
def test_kit_rejects_mutant_with_a_readable_trace(tmp_path, mutant):
    p = kit(f"unsee.specs.runtimes:{mutant}", tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "shrunk trace" in p.stdout and "rt.step(Observation(" in p.stdout and "rt.forget(" in p.stdout


def test_xfails_file_marks_known_failures(tmp_path):
    xf = tmp_path / "xfails.txt"
    xf.write_text("test_every_statement_holds_on_random_sessions\ntest_shipped_vectors\n")
    p = kit("unsee.specs.runtimes:crop_at_tau", tmp_path, f"--unsee-xfails={xf}")
    assert p.returncode == 0 and "2 xfailed" in p.stdout, p.stdout


def test_missing_runtime_option_is_a_clear_failure(tmp_path):
    p = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "unsee.specs.conformance", "-q",
                        "-p", "no:cacheprovider"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and "--unsee-runtime" in p.stdout


def test_plugin_imports_nothing_heavy():
    code = "import sys, unsee.specs.plugin; print(json.dumps(sorted(m for m in ('torch', 'transformers', 'z3', 'hypothesis') if m in sys.modules)))"
    p = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True)
    assert json.loads(p.stdout) == []


def test_shipped_vectors_match_the_reference_model():
    assert generate() == load_vectors(), "regenerate with: python -m unsee.specs.vectors"


@pytest.mark.heavy
def test_the_guides_example_command_works_verbatim():
    """The guide's command for the example runtime, run as written from docs/examples."""
    import re

    guide = (ROOT / "docs" / "verify-your-runtime.md").read_text()
    cmd = next(c for c in re.findall(r"```bash\n(.*?)```", guide, re.S) if "tiny_runtime:TinyRuntime" in c).strip()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    p = subprocess.run(["bash", "-c", cmd], cwd=ROOT / "docs" / "examples", capture_output=True, text=True,
                       timeout=600, env=env)
    assert p.returncode == 0 and "2 passed" in p.stdout, p.stdout + p.stderr


def test_the_guides_state_machine_runs_on_the_example_and_rejects_a_mutant(monkeypatch):
    """The guide's RuntimeMachine snippet, verbatim, on the from-scratch example; the same
    machine on a broken forget operator raises the statement it breaks."""
    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test

    from unsee.specs import runtimes
    from unsee.specs.machine import RuntimeMachine
    from unsee.specs.statements import SpecViolation

    monkeypatch.syspath_prepend(str(ROOT / "docs" / "examples"))
    guide = (ROOT / "docs" / "verify-your-runtime.md").read_text()
    code = next(c for c in re.findall(r"```python\n(.*?)```", guide, re.S) if "RuntimeMachine" in c)
    ns: dict = {}
    exec(code, ns)
    quick = settings(max_examples=15, stateful_step_count=10, derandomize=True, deadline=None)
    run_state_machine_as_test(ns["TinyRuntimeMachine"], settings=quick)

    class Broken(RuntimeMachine):
        def make_runtime(self, policy, sampling, seed):
            return runtimes.crop_at_tau({"policy": policy, "sampling": sampling, "seed": seed})

    with pytest.raises(SpecViolation):
        run_state_machine_as_test(Broken, settings=settings(quick, max_examples=200))


# --- the protocol's boundary: records as objects or mappings, every value checked -----------------

from types import SimpleNamespace  # noqa: E402

import networkx as nx  # noqa: E402

from unsee.model import Config, Observation, Part# noqa: E402
from unsee.specs.reference import ReferenceRuntime
from unsee.specs import statements as S  # noqa: E402
from unsee.specs.harness import verify  # noqa: E402
from unsee.specs.protocol import ProtocolViolation, checked  # noqa: E402

SESSION = (
    Observation("user", (Part("u1", "plan the trip"),), reply=2),
    Observation("memory", (Part("z", "alice lives at 12 elm street"),)),
    Observation("user", (Part("u2", "send it"),), reply=1, tool="send"),
    Observation("user", (Part("u3", "thanks"),), reply=2, tool="send"),
)


def as_json_args(args) -> dict:
    """A call's arguments (the reference keeps the JSON text it decoded; compensation entries hold
    the value) as another JSON object, with two keys whose order can be flipped."""
    value = json.loads(args) if isinstance(args, str) else args
    return {"to": f"k{value.get('key')}", "body": value}


class Reshaped(ReferenceRuntime):
    """The reference runtime, returning its records in another shape: `receipt`, `world_entry`,
    `compensation_entry` and `graph_of` rewrite what it returns (the identity by default)."""

    def receipt(self, r):
        return r

    def world_entry(self, e):
        return e

    def compensation_entry(self, c):
        return c

    def graph_of(self, g):
        return g

    def forget(self, sources, method="B7", checkpoint=None):
        r = dict(super().forget(sources, method, checkpoint))  # the receipt as the protocol's flat record
        return self.receipt(r | {"compensation": tuple(self.compensation_entry(c) for c in r["compensation"])})

    @property
    def world(self):
        return [self.world_entry(e) for e in super().world]

    def graph(self):
        return self.graph_of(super().graph())


def run(cls, stream=SESSION, sources=("z",)):
    return S.observe(lambda: cls(Config(), "every"), stream, sources, policy="every")


class DictRecords(Reshaped):
    """Everything as dicts, as unsee's own `Agent.forget` returns its receipt; arguments as JSON objects."""

    def receipt(self, r):
        return r | {"replayed": list(r["replayed"])}

    def world_entry(self, e):
        return {"call_id": e.call_id, "tool": e.tool, "args": as_json_args(e.args), "turn": e.turn}

    def compensation_entry(self, c):
        return {**c, "args": c["args"] and as_json_args(c["args"]), "committed": c["committed"] and as_json_args(c["committed"])}


class ObjectRecords(DictRecords):
    """Everything as objects with attributes (compensation entries included); JSON-object arguments
    whose keys come in another order than the oracle's."""

    def receipt(self, r):
        return SimpleNamespace(**super().receipt(r))

    def world_entry(self, e):
        return SimpleNamespace(**super().world_entry(e))

    def compensation_entry(self, c):
        d = super().compensation_entry(c)
        flip = lambda a: a and dict(reversed(list(a.items())))  # noqa: E731
        return SimpleNamespace(**d | {"args": flip(d["args"]), "committed": flip(d["committed"])})


@pytest.mark.parametrize("cls", [DictRecords, ObjectRecords])
def test_records_as_dicts_or_objects_with_json_arguments_pass_every_statement(cls):
    ob = run(cls)
    assert ob.receipt.compensation and all(isinstance(c.committed, dict) for c in ob.receipt.compensation)
    S.check_all(ob)
    doc = verify(lambda cfg: lambda: cls(Config(sampling=cfg["sampling"], seed=cfg["seed"]), cfg["policy"]),
                 examples=15, seed=0)
    assert doc["failures"] == [] and doc["forgets"] > 0


class WrongArguments(DictRecords):
    """Reports the committed arguments as the twin's (an A3 report the JSON comparison must still catch)."""

    def compensation_entry(self, c):
        d = super().compensation_entry(c)
        return d | {"args": d["committed"]}


def test_json_arguments_are_compared_not_just_carried():
    with pytest.raises(S.SpecViolation, match="A3 report: compensation entry"):
        S.assumption_a3_side_effects(run(WrongArguments))


def expect(cls, *fragments: str) -> str:
    """`cls` stops the kit with a `ProtocolViolation` whose message holds every fragment."""
    with pytest.raises(ProtocolViolation) as e:
        run(cls)
    for fragment in fragments:
        assert fragment in str(e.value), str(e.value)
    return str(e.value)


def test_a_receipt_without_tau_is_named_at_its_step():
    class NoTau(DictRecords):
        def receipt(self, r):
            return {k: v for k, v in super().receipt(r).items() if k != "tau"}

    msg = expect(NoTau, "the runtime returned a receipt without `tau` at the forget after step 4 of a fresh runtime")
    assert "(rt.forget(['z'], method='B7', checkpoint=None))" in msg and "add `tau` to it" in msg


def test_a_receipt_with_a_wrong_type_is_named():
    class TextTau(Reshaped):
        def receipt(self, r):
            return r | {"tau": str(r["tau"])}

    expect(TextTau, "the runtime returned a receipt with `tau` = a str ('2') at the forget after step 4",
           "`tau` is an int ≥ 1; give `tau` as a whole number")

    class NoReceipt(Reshaped):
        def receipt(self, r):
            return None

    expect(NoReceipt, "the runtime returned a receipt as None at the forget after step 4")


def test_a_world_entry_without_call_id_is_named():
    class NoCallId(DictRecords):
        def world_entry(self, e):
            return {k: v for k, v in super().world_entry(e).items() if k != "call_id"}

    expect(NoCallId, "the runtime returned world entry 0 without `call_id` at step 4 of a fresh runtime "
                     "driven over the same log (rt.world)")


def test_a_world_entry_whose_arguments_are_not_json_is_named():
    class SetArgs(DictRecords):
        def world_entry(self, e):
            return super().world_entry(e) | {"args": set(e.args)}

    expect(SetArgs, "world entry 0 with `args` = a set")


def test_a_compensation_entry_of_the_wrong_type_is_named():
    class TupleEntry(Reshaped):
        def compensation_entry(self, c):
            return tuple(c.values())

    expect(TupleEntry, "the runtime returned compensation entry 0 as a tuple")

    class BadReason(Reshaped):
        def compensation_entry(self, c):
            return c | {"reason": "changed"}

    expect(BadReason, "compensation entry 0 with `reason` = 'changed'", "`reason` is one of 'not committed'")

    class NotAList(Reshaped):
        def receipt(self, r):
            return r | {"compensation": r["compensation"][0] if r["compensation"] else {}}

    expect(NotAList, "the receipt's compensation as a dict")


def test_a_graph_that_is_not_a_digraph_is_named():
    class Undirected(Reshaped):
        def graph_of(self, g):
            return nx.Graph(g)

    expect(Undirected, "the runtime returned a graph as a Graph at the start of a fresh runtime driven over the same "
                       "log (rt.graph()): graph() returns a networkx.DiGraph")

    class NoSources(Reshaped):
        def graph_of(self, g):
            for _, d in g.nodes(data=True):
                d.pop("source_ids")
            return g

    expect(NoSources, "without `source_ids` at step 1 of a fresh runtime driven over the same log (rt.graph())")

    class TextSources(Reshaped):
        def graph_of(self, g):
            for _, d in g.nodes(data=True):
                d["source_ids"] = ",".join(sorted(d["source_ids"]))
            return g

    expect(TextSources, "with `source_ids` = a str")


def test_digests_log_counters_and_checkpoints_are_checked():
    class ListDigest(Reshaped):
        def digest(self):
            return list(super().digest().values())

    expect(ListDigest, "the runtime returned digest() as a list")

    class BytesDigest(Reshaped):
        def digest(self):
            return {k: v.encode() for k, v in super().digest().items()}

    expect(BytesDigest, "each layer name and each digest is a str")

    class JsonLog(Reshaped):
        @property
        def observations(self):
            return [o.to_json() for o in super().observations]

    expect(JsonLog, "the log with item 0 as a dict")

    class FloatCount(Reshaped):
        @property
        def invocations(self):
            return float(super().invocations)

    expect(FloatCount, "invocations with `invocations` = a float")

    class TextCheckpoints(Reshaped):
        @property
        def checkpoints(self):
            return "0,1,2"

    expect(TextCheckpoints, "the checkpoints as a str")


def test_a_factory_that_returns_no_runtime_is_named():
    with pytest.raises(ProtocolViolation, match="lacks reset, step, forget, digest, graph, invocations, "
                                                "observations, checkpoints, world"):
        checked(object())


def test_a_protocol_mistake_reaches_the_kit_report_with_a_trace():
    """Through `verify`, as the kit prints it: the guide's form and a runnable trace, no traceback."""
    class NoTau(DictRecords):
        def receipt(self, r):
            return {k: v for k, v in super().receipt(r).items() if k != "tau"}

    doc = verify(lambda cfg: lambda: NoTau(Config(sampling=cfg["sampling"], seed=cfg["seed"]), cfg["policy"]),
                 examples=5, seed=0, shrink_seconds=5)
    assert len(doc["failures"]) == 1
    f = doc["failures"][0]
    assert f["statement"] == "ProtocolViolation"
    assert re.search(r"the runtime returned a receipt without `tau` at the forget after step \d+ of ", f["message"])
    assert any("rt.forget(" in x for x in f["trace"])


def test_the_guide_lists_every_field_of_every_record():
    """The guide's "The types" section names each field the boundary checks, with whether it is required."""
    from unsee.specs.protocol import COMPENSATION_ENTRY, NODE, RECEIPT, WORLD_ENTRY

    guide = (ROOT / "docs" / "verify-your-runtime.md").read_text()
    types = guide[guide.index("### The types"):guide.index("### What the kit compares against")]
    for record, spec in (("receipt", RECEIPT), ("world entry", WORLD_ENTRY), ("compensation entry", COMPENSATION_ENTRY),
                         ("graph node", NODE)):
        for name, (required, _) in spec.items():
            assert f"| {record} | `{name}` | {'yes' if required else 'no'} |" in types, (record, name)


def test_the_ledger_example_passes_with_dict_records_and_side_effects(monkeypatch):
    """docs/examples/ledger_runtime.py: dict receipts, world and compensation entries, JSON-object
    arguments, only the promised checkpoints; the run reaches forgets that must report compensation."""
    monkeypatch.syspath_prepend(str(ROOT / "docs" / "examples"))
    from ledger_runtime import LedgerRuntime

    doc = verify(lambda cfg: lambda: LedgerRuntime(cfg), examples=40, seed=0)
    assert doc["failures"] == [], doc["failures"][0]["message"]
    assert doc["coverage"]["side effect the twin does not make as committed: compensation listed"] > 0
    assert doc["coverage"]["policy has no checkpoint at tau-1"] > 0


def test_a_committed_call_that_sent_forgotten_text_is_reported_not_a_privacy_failure(monkeypatch):
    """A3 asks the receipt for what a committed call sent; when that held the forgotten text the
    world has it already, and the privacy statement does not count the report against the runtime."""
    monkeypatch.syspath_prepend(str(ROOT / "docs" / "examples"))
    from ledger_runtime import LedgerRuntime

    stream = (Observation("user", (Part("z1", "alice lives"),), tool="send"), Observation("user", (Part("s1", "ok"),)))
    ob = S.observe(lambda: LedgerRuntime({"policy": "every"}), stream, ["z1"], policy="every")
    (entry,) = ob.receipt.compensation
    assert entry.committed == {"to": "bob", "text": "alice lives"} and entry.reason == "arguments differ"
    S.check_all(ob)


def test_a_graph_with_an_edge_to_a_node_never_added_is_named():
    class Dangling(Reshaped):
        def graph_of(self, g):
            if g.number_of_nodes():
                g.add_edge("gone", next(iter(g.nodes)))
            return g

    expect(Dangling, "the runtime returned a graph with an edge to or from 'gone', a node it never added at step 1",
           "(rt.graph())")


@pytest.mark.parametrize("mutant", ["crop_at_tau", "keeps_hidden_parts", "wrong_log_after_forgets", "ignores_method"])
def test_a_failure_trace_run_as_printed_raises_the_failure_it_reports(mutant):
    """The trace is the reproduction: pasted with `factory` the user's factory, it drives the
    runtime under the kit's checks and raises the statement the run reported; with the kit's
    `checking` swapped for the bare factory it replays the calls alone."""
    from unsee.specs import runtimes
    from unsee.specs.harness import verify

    factory = getattr(runtimes, mutant)
    doc = verify(lambda cfg: lambda: factory(cfg), examples=30, seed=0, shrink_seconds=5)
    assert doc["failures"], f"{mutant} passed the kit"
    for f in doc["failures"]:
        code = "\n".join(f["trace"])
        with pytest.raises(AssertionError) as raised:
            exec(code, {"factory": factory})
        assert type(raised.value).__name__ == f["statement"]
        assert str(raised.value).split(":")[0] == f["message"].split(":")[0], (str(raised.value), f["message"])
        bare = code.replace("from unsee.specs.harness import checking\n", "").replace("checking(factory, ", "factory(")
        exec(bare.rsplit("\nrt.finish()", 1)[0], {"factory": factory})  # the calls alone raise nothing


def test_a_factory_that_raises_fails_each_vector_in_the_guides_form():
    """The shipped vectors report a runtime's exception as the random sessions do ("the runtime
    raised X … at construction"), a failure of the vector, not a traceback out of the kit."""
    from unsee.specs.vectors import load_vectors, run_vectors

    def factory(cfg):
        raise ValueError(f"no runtime for {cfg['policy']}")

    vectors = load_vectors()[:2]
    report = run_vectors(lambda cfg: (lambda: factory(cfg)), vectors)
    assert report["ran"] == sorted(v["id"] for v in vectors) and len(report["failures"]) == 2
    assert report["failures"][0]["message"].startswith(
        f"the runtime raised ValueError: no runtime for {vectors[0]['config']['policy']} at construction (factory())")


# --- placements reached by construction -------------------------------------------------------------

def _factory_of(cls):
    def factory_for(cfg):
        return lambda: cls(Config(sampling=cfg["sampling"], seed=cfg["seed"]), cfg["policy"])
    return factory_for


def test_every_coverage_target_is_reached_by_the_directed_programs_alone():
    """No random example at all: every combination of where the statements' rules fall (τ against T,
    c* against τ, a compaction and a committed call against τ) is reached by construction."""
    from unsee.specs.harness import PLACEMENT_TARGETS

    doc = verify(_factory_of(ReferenceRuntime), examples=0, seed=0)
    assert doc["failures"] == []
    assert {k for k, v in doc["targets"].items() if v["forgets"] == 0} == set()  # every target, not only these
    assert len(PLACEMENT_TARGETS) == 72 and set(PLACEMENT_TARGETS) <= set(doc["targets"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_runtime_wrong_only_in_a_rare_conjunction_is_rejected_at_every_seed(seed):
    """Wrong only where the transition right before τ compacted, the forget is at the runtime's own
    checkpoint and one is kept at τ: the directed programs place it in every run."""
    from unsee.specs.mutants import RARE_MUTANTS

    (mutant,) = RARE_MUTANTS
    doc = verify(_factory_of(mutant), examples=5, seed=seed)
    assert doc["failures"], "the rare conjunction was not reached"
    assert any("compact=True" in line for f in doc["failures"] for line in f["trace"])


def test_the_ci_profile_rejects_a_rare_mistake_and_writes_a_session_the_printed_command_replays(tmp_path):
    failures = tmp_path / "failures"
    p = kit("unsee.specs.runtimes:crops_late_after_a_compaction", tmp_path, "--unsee-profile=ci",
            f"--unsee-failures={failures}")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "replay it alone with:" in p.stdout
    cmd = next(line.strip() for line in p.stdout.splitlines() if line.strip().startswith("python -m unsee.specs.replay"))
    path = Path(cmd.split()[3])
    assert path.parent == failures and path.exists()
    assert cmd.endswith("--unsee-runtime unsee.specs.runtimes:crops_late_after_a_compaction")
    doc = json.loads(path.read_text())
    assert any(op == "obs" and arg["compact"] for op, arg in doc["program"])
    again = subprocess.run([sys.executable, *cmd.split()[1:]], capture_output=True, text=True, timeout=300)
    assert again.returncode == 1 and doc["statement"] in again.stdout, again.stdout + again.stderr
    fixed = subprocess.run([sys.executable, "-m", "unsee.specs.replay", str(path), "--unsee-runtime",
                            "unsee.specs.runtimes:reference"], capture_output=True, text=True, timeout=300)
    assert fixed.returncode == 0 and "passes every statement" in fixed.stdout, fixed.stdout + fixed.stderr
