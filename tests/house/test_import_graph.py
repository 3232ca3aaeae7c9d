"""The package's import graph: one-way dependencies, no cycles, no borrowed private names.

model imports nothing of unsee; specs and proofs import model only; impl imports the rest.
Built from the source with `ast`, so a violation fails here before anyone reads the code."""

import ast
import re
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"model": "unsee.model", "specs": "unsee.specs", "proofs": "unsee.proofs", "impl": "unsee.impl"}
ALLOWED = {"model": set(), "specs": {"model"}, "proofs": {"model"}, "impl": {"model", "specs", "proofs"}}


def modules() -> dict[str, Path]:
    out = {}
    for folder, pkg in PACKAGES.items():
        for f in sorted((ROOT / folder).rglob("*.py")):
            rel = f.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([pkg, *parts])] = f
    return out


def imports(path: Path) -> list[tuple[str, tuple[str, ...]]]:
    """(module imported, names taken from it) for every unsee import in the file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, ()) for a in node.names if a.name.startswith("unsee.")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("unsee."):
            out.append((node.module, tuple(a.name for a in node.names)))
    return out


def graph():
    mods = modules()
    g = nx.DiGraph()
    problems = []
    for name, path in mods.items():
        g.add_node(name)
        layer = name.split(".")[1]
        for target, names in imports(path):
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in mods]  # `from pkg import module`
            for dest in subs or [target]:
                if dest in mods and dest != name:
                    g.add_edge(name, dest)
            to_layer = target.split(".")[1]
            if to_layer != layer and to_layer not in ALLOWED[layer]:
                problems.append(f"{name} imports {target} ({layer} may import {sorted(ALLOWED[layer]) or 'nothing'})")
            for n in names:
                sub = f"{target}.{n}" in mods
                if n.startswith("_") and not sub:
                    problems.append(f"{name} imports the private name {n} of {target}")
    return g, problems


def test_dependencies_run_one_way_and_no_private_name_is_borrowed():
    _, problems = graph()
    assert not problems, "\n".join(problems)


def test_no_import_cycle():
    g, _ = graph()
    cycles = list(nx.simple_cycles(g))
    assert not cycles, cycles


def test_the_checker_sees_a_violation(tmp_path, monkeypatch):
    """The test can fail: a model module that imports impl, and a private name, are reported."""
    bad = tmp_path / "model" / "bad.py"
    bad.parent.mkdir()
    bad.write_text("from unsee.impl.engine.kv import KVEngine\nfrom unsee.model.session import _secret\n")
    for folder in ("specs", "proofs", "impl"):
        (tmp_path / folder).mkdir()
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    _, problems = graph()
    assert any("imports unsee.impl.engine.kv" in p for p in problems)
    assert any("private name _secret" in p for p in problems)


MUTABLE = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)


def mutable_globals(root: Path) -> list[str]:
    """Module-level names bound to a mutable container, or to an instance that carries
    attributes, in the spec layers (model, specs, proofs): state a call could leave behind."""
    out = []
    for folder in ("model", "specs", "proofs"):
        for f in sorted((root / folder).rglob("*.py")):
            for node in ast.parse(f.read_text()).body:
                if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, MUTABLE):
                    names = [t.id for t in getattr(node, "targets", [getattr(node, "target", None)]) if isinstance(t, ast.Name)]
                    out += [f"{f.relative_to(root)}: {n}" for n in names]
    return out


def test_no_mutable_module_state_in_the_spec_layers():
    assert not mutable_globals(ROOT)
    from unsee.model.lm import REFERENCE

    assert vars(REFERENCE) == {}, "the shared reference LM must hold no state"


def test_the_mutable_state_check_can_fail(tmp_path):
    for folder in ("model", "specs", "proofs"):
        (tmp_path / folder).mkdir()
    (tmp_path / "model" / "bad.py").write_text("CACHE = {}\nSEEN: list = []\nOK = (1, 2)\n")
    assert mutable_globals(tmp_path) == ["model/bad.py: CACHE", "model/bad.py: SEEN"]


CONCERNS = {"engine", "store", "organism", "experiments", "integrations"}
# Within impl, each concern imports only those below it: the engine nothing; the store, the
# organisms and the integrations the engine; the experiments all three; the command line all.
IMPL_LAYERS = {"engine": set(), "store": {"engine"}, "organism": {"engine"}, "integrations": {"engine"},
               "experiments": {"engine", "store", "organism"},
               "cli": {"engine", "store", "organism", "experiments", "integrations"}}


def test_every_impl_module_sits_in_a_folder_that_names_its_concern():
    top = sorted(f.name for f in (ROOT / "impl").glob("*.py"))
    assert top == ["__init__.py"], f"impl/ holds only the package's own file, not {top}"
    folders = {f.relative_to(ROOT / "impl").parts[0] for f in (ROOT / "impl").rglob("*.py") if f.parent != ROOT / "impl"}
    assert folders == CONCERNS | {"cli"}, folders



def impl_concern(module: str) -> str | None:
    """`engine` for unsee.impl.engine.kv, `cli` for unsee.impl.cli; None for the package itself."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["unsee", "impl"] and len(parts) > 2 else None


def upward_arrows(g) -> list[str]:
    out = []
    for a, b in g.edges():
        ca, cb = impl_concern(a), impl_concern(b)
        if ca and cb and ca != cb and cb not in IMPL_LAYERS[ca]:
            out.append(f"{a} imports {b} ({ca} may import {sorted(IMPL_LAYERS[ca]) or 'nothing of impl'})")
    return out


def test_impl_concerns_import_only_those_below_them():
    g, _ = graph()
    assert not upward_arrows(g)


def test_the_layering_check_sees_an_arrow_back_up():
    g = nx.DiGraph([("unsee.impl.engine.kv", "unsee.impl.organism.data"), ("unsee.impl.store.sqlite", "unsee.impl.engine.pages")])
    assert upward_arrows(g) == ["unsee.impl.engine.kv imports unsee.impl.organism.data (engine may import nothing of impl)"]


# A module past LONG lines is one concept too large to split well, named here; anything else that
# long holds two and is split. An entry that falls under LONG is stale and is removed.
LONG = 500
ONE_CONCEPT = {
    "unsee.model.state": "the state R_t, the observation o_t and the transition F",
    "unsee.proofs.code": "the CrossHair contracts on the model's pure functions",
    "unsee.proofs.obligations": "the Z3 obligations on the abstract F",
    "unsee.impl.organism.data": "the episode families recall-tiny is trained and measured on",
    "unsee.impl.store.sqlite": "the Store class (its encoding, digests and locking are their own modules)",
    "unsee.specs.traces": "the event log of a forget: its events, the walk over it and one checker per rule",
}


def test_no_module_is_long_unless_it_is_one_named_concept():
    sizes = {name: len(path.read_text().splitlines()) for name, path in modules().items()}
    long = {name for name, n in sizes.items() if n > LONG}
    assert long - ONE_CONCEPT.keys() == set(), "split by concept, or name the one concept here"
    assert ONE_CONCEPT.keys() - long == set(), "no longer long: remove it from ONE_CONCEPT"


# the names of metering, drafts, B5′'s prefix cache and the mutants' hooks (a receipt's counts are data: allowed)
ENGINE_NAMES = re.compile(r"(Meter|meter|hints?|drafts?|draft_\w+|credit|reuse|prefix_cache|graft|snapshot|mutants?|"
                          r"after_step|decode_cost)")


def engine_words_in_model(root: Path) -> dict[str, list[str]]:
    """file → the names of metering, drafts, caches and mutants its code (not its docstrings) holds."""
    import io
    import tokenize

    out = {}
    for path in sorted((root / "model").glob("*.py")):
        names = {tok.string for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
                 if tok.type == tokenize.NAME and ENGINE_NAMES.fullmatch(tok.string)}
        if names:
            out[path.name] = sorted(names)
    return out


def test_the_model_is_the_spec_alone_no_metering_drafts_or_mutants():
    """`model/` is F, the plan, the state and the observation algebra: the engine's counting, its
    drafts and prefix cache, and the mutants' hooks live in `impl/engine` and `specs/`."""
    assert engine_words_in_model(ROOT) == {}
    from unsee.model.lm import LM

    asked = {n for n in vars(LM) if not n.startswith("_")} - {"name"}
    assert asked == {"encode", "header", "grammar", "json_text", "empty", "prefill", "decode", "crop", "kv_length",
                     "resident", "rebuild", "select", "kv_digest"}


def test_the_engine_word_check_sees_a_meter_in_the_model(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "state.py").write_text('"""a Meter in a docstring is prose"""\nmeter.tokens += 1\n')
    assert engine_words_in_model(tmp_path) == {"state.py": ["meter"]}
