"""The package list, found instead of written out: everything else is in pyproject.toml.

The source folders are not named like the packages they become (model/ is `unsee.model`,
impl/ is `unsee.impl`, ...), so `[tool.setuptools.packages.find]` cannot name them. Here each
folder of `[tool.setuptools.package-dir]` and every folder under it with an `__init__.py`
becomes `unsee.<path with dots>`; tests/, scripts/ and docs/ are under none of them, so they
are never shipped. tests/house/test_packaging.py checks the list against the tree.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent


def package_dirs(root: Path = ROOT) -> dict[str, str]:
    """pyproject's `[tool.setuptools.package-dir]`: package name -> its folder (relative)."""
    with open(root / "pyproject.toml", "rb") as f:
        return dict(tomllib.load(f)["tool"]["setuptools"]["package-dir"])


def packages(root: Path = ROOT) -> list[str]:
    """Every package the wheel ships: each mapped folder and each folder under it holding an
    `__init__.py`, as `unsee.<folder>.<sub>...`."""
    out = []
    for name, folder in sorted(package_dirs(root).items()):
        out.append(name)
        out += [f"{name}.{sub}" for sub in find_packages(where=str(root / folder))]
    return sorted(out)


if __name__ == "__main__":  # setuptools runs this file as __main__; the tests import it
    setup(packages=packages())
