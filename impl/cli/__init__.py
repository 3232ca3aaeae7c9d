"""The `unsee` command line: each module parses its commands' options, calls the domain code and
renders the result. Heavy imports (torch, transformers) happen inside commands."""

from __future__ import annotations

from unsee.impl.cli.common import app
from unsee.impl.cli import proofs, store_commands, experiments, bench  # noqa: F401  (each registers its commands on app)


def main() -> None:  # pragma: no cover
    app(prog_name="unsee")
