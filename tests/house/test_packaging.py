"""The wheel ships every package and data file of the source tree, and nothing else.

An editable install (what scripts/setup.sh makes, and what these tests run on) finds every
module in the checkout, so a package the wheel leaves out goes unnoticed until someone installs
the wheel. Here setuptools configures the build exactly as `pip wheel .` does (setup.py plus
pyproject.toml, stopped before building), and its packages, folders and data patterns are
compared with the tree. scripts/check_wheel.sh builds and installs the real wheel.
"""

import fnmatch
import os
import re
import tomllib
import warnings
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"unsee.model": "model", "unsee.impl": "impl", "unsee.specs": "specs", "unsee.proofs": "proofs"}


def build_config(monkeypatch):
    """setuptools' Distribution for this project, configured as for a build: setup.py run as
    setuptools runs it, pyproject.toml applied."""
    import setuptools  # noqa: F401  (first: `distutils` is then setuptools' own)
    from distutils.core import run_setup

    monkeypatch.chdir(ROOT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # setuptools' deprecation notices about pyproject fields
        return run_setup(str(ROOT / "setup.py"), stop_after="config")


def source_packages(root: Path = ROOT) -> set[str]:
    """Every folder under model/, impl/, specs/, proofs/ holding an __init__.py, as the package
    it must become (found by walking the tree, not by setuptools)."""
    out = set()
    for name, folder in FOLDERS.items():
        for here, dirs, files in os.walk(root / folder):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            if "__init__.py" in files:
                rel = Path(here).relative_to(root / folder).parts
                out.add(".".join((name, *rel)))
    return out


def unshipped(packages, root: Path = ROOT) -> list[str]:
    """The problems with a package list: source packages it lacks, and packages it should not
    have (outside unsee.*, `unsee` itself, anything from tests/)."""
    packages = set(packages)
    out = [f"not shipped: {p}" for p in sorted(source_packages(root) - packages)]
    out += [f"shipped but not a source package: {p}" for p in sorted(packages - source_packages(root))]
    out += [f"not under unsee.*: {p}" for p in sorted(packages) if not p.startswith("unsee.")]
    out += [f"a tests package: {p}" for p in sorted(packages) if "tests" in p.split(".")]
    return out


def data_files_left_out(package_dir: dict, package_data: dict, root: Path = ROOT) -> list[str]:
    """Non-.py files under the package folders that no package-data pattern of their package matches."""
    folders = {Path(root / d): name for name, d in package_dir.items()}
    missing = []
    for base, name in folders.items():
        for here, dirs, files in os.walk(base):
            dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
            for f in files:
                if f.endswith((".py", ".pyc")) or f.startswith("."):
                    continue
                path = Path(here) / f
                # the deepest package holding the file, and the file's path relative to it
                pkg, rel = name, path.relative_to(base)
                parts = rel.parts[:-1]
                for i in range(len(parts), 0, -1):
                    if (base.joinpath(*parts[:i]) / "__init__.py").exists():
                        pkg, rel = ".".join((name, *parts[:i])), Path(*rel.parts[i:])
                        break
                pats = list(package_data.get(pkg, ())) + list(package_data.get("", ()))
                if not any(len(Path(p).parts) == len(rel.parts)
                           and all(fnmatch.fnmatchcase(a, b) for a, b in zip(rel.parts, Path(p).parts))
                           for p in pats):
                    missing.append(f"{path.relative_to(root)} (package {pkg}, patterns {pats})")
    return missing


def test_the_build_ships_every_source_package_and_no_other(monkeypatch):
    dist = build_config(monkeypatch)
    assert dict(dist.package_dir) == FOLDERS  # unsee.model -> model/, ...; `unsee` stays a namespace
    assert not unshipped(dist.packages), unshipped(dist.packages)
    assert {"unsee.impl.cli", "unsee.impl.integrations.langgraph"} <= set(dist.packages)
    assert len(dist.packages) == len(set(dist.packages))


def test_the_package_check_sees_a_package_left_out_and_one_too_many():
    found = sorted(source_packages())
    assert unshipped(found) == []
    assert unshipped([p for p in found if p != "unsee.impl.cli"]) == ["not shipped: unsee.impl.cli"]
    assert unshipped([*found, "tests", "model"]) == [
        "shipped but not a source package: model", "shipped but not a source package: tests",
        "not under unsee.*: model", "not under unsee.*: tests", "a tests package: tests"]


def test_every_data_file_under_the_packages_is_package_data(monkeypatch):
    """The vectors, the organisms' weights, and any data file added later (a .json the code opens
    beside its module) are in the wheel."""
    dist = build_config(monkeypatch)
    assert not data_files_left_out(dist.package_dir, dist.package_data), \
        data_files_left_out(dist.package_dir, dist.package_data)
    assert data_files_left_out(dist.package_dir, {}), "the check sees nothing to ship"


def test_dependencies_are_listed_once():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lists = {"dependencies": project["dependencies"], **project.get("optional-dependencies", {})}
    for where, reqs in lists.items():
        names = [re.split(r"[\s<>=!~;\[(]", r, maxsplit=1)[0].lower().replace("_", "-").replace(".", "-")
                 for r in reqs]
        assert len(names) == len(set(names)), f"{where}: {sorted(n for n in names if names.count(n) > 1)}"
