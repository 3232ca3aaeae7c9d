"""Hypothesis profiles and shared fixtures.

The tests sit in one folder per layer they test:
  model/         the reference runtime (`unsee.model`): its state machine, the oracle, refinement
                 against Z3's closure, grammar and tool calls
  specs/         statements, mutants, the conformance kit, planted bugs, the manifest, Z3 and code proofs
  engine/        the KV engine on real transformers: exactness, K/V pages, fixed points, traces, the
                 converted-weights cache, SmolLM2
  store/         the SQLite store: format, integrity, durability, concurrency, `unsee run/forget/check/show`,
                 the Python API (`Agent`)
  experiments/   bench, audits, AgentDojo, the trained organisms
  integrations/  LangGraph
  house/         the house rules: the import graph, tiers, docs, the command line's contracts
`kv_helpers.py` (shared by several folders) and `data/` stay here.

Profiles: `dev` (default, quick), `ci` (what .ci/run uses), `nightly` (long). Select with
HYPOTHESIS_PROFILE=<name>. Everything is seeded: `derandomize` makes runs repeatable.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=60, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", max_examples=120, deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("nightly", max_examples=2000, deadline=None, derandomize=False,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def _unsee_source():
    """Where unsee is imported from. With UNSEE_WHEEL (CI: .ci/run installs the built wheel in .venv
    instead of the editable checkout) it must be the installed wheel, or the run would not test it."""
    from pathlib import Path

    import unsee.model

    where = Path(unsee.model.__file__).resolve().parent.parent
    if os.environ.get("UNSEE_WHEEL"):
        if "site-packages" not in where.parts:  # an editable install imports from the checkout itself
            raise RuntimeError(f"UNSEE_WHEEL is set but unsee is imported from {where}, not the installed wheel: "
                               "run UNSEE_WHEEL=... bash scripts/setup.sh first")
    return where


def pytest_configure(config):
    config.unsee_source = _unsee_source()


def pytest_report_header(config):
    return f"unsee: {config.unsee_source}" + (" (the wheel)" if os.environ.get("UNSEE_WHEEL") else "")


# `unsee run` chooses kernel, dtype and threads by timing unless told, and each choice is a state
# with its own bits. A test's store must not depend on a timing, so the tests (and the processes
# they start) run `unsee run` under these unless a test says otherwise; the tests of the choice
# pass auto themselves.
for _name, _value in (("UNSEE_ATTN", "eager"), ("UNSEE_DTYPE", "float32"), ("UNSEE_THREADS", "1")):
    os.environ.setdefault(_name, _value)


# Tiers. Every test belongs to exactly one, marked in its own file: `pytestmark = pytest.mark.tiny`
# for a module, `@pytest.mark.heavy` (or slow, gpu) for one test; a test with no tier mark is
# `fast`. The README's test command runs all that this machine can (`gpu` skips itself without
# CUDA). Pick tiers with -m, e.g. -m fast, or -m "not slow and not heavy".
#   fast   pure Python: the state machine, specs, proofs, mutants on the reference (the default)
#   tiny   a real transformer from the tiny families (seconds per test, torch on CPU)
#   heavy  minutes: the kit in subprocesses, mutant sweeps, the kill loop, the 10^5-node graph
#   slow   SmolLM2 and long profiles
#   gpu    CUDA exactness checks
import pytest  # noqa: E402

TIERS = ("fast", "tiny", "heavy", "slow", "gpu")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if not any(item.get_closest_marker(m) for m in TIERS):
            item.add_marker(pytest.mark.fast)
