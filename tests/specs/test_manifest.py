"""The manifest keeps statements, specs, proofs and tests in step."""

import ast
from pathlib import Path

from unsee.proofs.code import PROOFS as CODE_PROOFS
from unsee.proofs.obligations import ENCODING_CHECKS, OBLIGATIONS, TIES_OF
from unsee.proofs.ties import TIES
from unsee.specs import statements
from unsee.specs.manifest import MANIFEST

ROOT = Path(__file__).resolve().parents[2]


def _defined_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    names |= {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    return names


def test_every_manifest_name_exists():
    obligation_names = {o.__name__ for o in OBLIGATIONS}
    for row in MANIFEST:
        assert callable(getattr(statements, row["spec"], None)), f"{row['statement']}: no spec {row['spec']}"
        for p in row["proofs"]:
            assert p in obligation_names, f"{row['statement']}: no obligation {p}"
        for f in row["code"]:
            assert f in {c.name for c in CODE_PROOFS}, f"{row['statement']}: no code-level check of {f}"
        for t in row.get("ties", ()):
            assert t in {tie.name for tie in TIES}, f"{row['statement']}: no code tie {t}"
        for p in row.get("encoding_checks", ()):
            assert p in {o.__name__ for o in ENCODING_CHECKS}, f"{row['statement']}: no encoding check {p}"
        assert row["tests"], f"{row['statement']}: no test runs it"
        for t in row["tests"]:
            file, name = t.split("::")
            assert name in _defined_names(ROOT / file), f"{row['statement']}: no test {t}"


def test_no_spec_or_obligation_is_left_out():
    listed_specs = {row["spec"] for row in MANIFEST}
    specs = {f.__name__ for f in statements.FORGET_STATEMENTS + statements.SHARED_STATEMENTS} | {
        "assumption_a1_deterministic_decoding"}
    assert specs == listed_specs
    listed_proofs = {p for row in MANIFEST for p in row["proofs"]}
    assert {o.__name__ for o in OBLIGATIONS} == listed_proofs
    assert {o.__name__ for o in ENCODING_CHECKS} == {p for row in MANIFEST for p in row.get("encoding_checks", ())}
    assert {c.name for c in CODE_PROOFS} == {f for row in MANIFEST for f in row["code"]}
    assert {t.name for t in TIES} == {t for row in MANIFEST for t in row.get("ties", ())}


def test_each_row_lists_the_ties_of_its_obligations():
    """A row's ties are those its obligations rest on (obligations.TIES_OF), so the manifest and
    the prover say the same thing about which code each statement is checked against."""
    for row in MANIFEST:
        want = {t for p in row["proofs"] for t in TIES_OF[p]}
        assert want <= set(row.get("ties", ())), f"{row['statement']}: ties {sorted(want)} not listed"
