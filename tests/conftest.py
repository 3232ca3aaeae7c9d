"""Hypothesis profiles and shared fixtures.

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


# Tiers. Every test belongs to one; the README's test command runs all that this machine can
# (`gpu` skips itself without CUDA). Pick a tier with -m, e.g. -m "not slow and not heavy".
#   fast   pure Python: the state machine, specs, proofs, mutants on the reference (default)
#   tiny   a real transformer from the tiny families (seconds per test, torch on CPU)
#   heavy  minutes: the kit in subprocesses, mutant sweeps, the kill loop, the 10^5-node graph
#   slow   SmolLM2 and long profiles (marked in the test files)
#   gpu    CUDA exactness checks (marked in the test files)
import pytest  # noqa: E402

TINY_MODULES = {"test_api", "test_show", "test_concurrency", "test_integrity", "test_audit", "test_audit_parallel", "test_cli_store", "test_durability", "test_fixed_point", "test_kv_engine",
                "test_kv_exact", "test_kv_pages", "test_model_cache", "test_bench", "test_traces", "test_langgraph",
                "test_refinement", "test_organism"}
HEAVY = {"test_kit.py::test_kit_rejects_mutant_with_a_readable_trace", "test_kit.py::test_the_guides_example_command_works_verbatim",
         "test_mutants.py::test_protocol_mutant_is_caught_by_the_default_run",
         "test_kit.py::test_example_runtime_passes_the_kit",
         "test_mutants.py::test_mutant_is_caught_with_a_short_trace", "test_mutants.py::test_state_machine_rejects_mutant",
         "test_durability.py::test_kill_9_at_random_moments_never_leaves_a_half_state",
         "test_bench.py::test_taint_closure_on_a_large_graph", "test_bench.py::test_agent_shape_across_processes",
         "test_oracle.py::test_report_mutant_is_caught_by_the_default_run",
         "test_oracle.py::test_reference_reaches_every_coverage_target_in_the_default_run"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        name = f"{item.path.name}::{item.originalname}"
        if name in HEAVY:
            item.add_marker(pytest.mark.heavy)
        if item.path.stem in TINY_MODULES and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.tiny)
        if not any(item.get_closest_marker(m) for m in ("tiny", "heavy", "slow", "gpu")):
            item.add_marker(pytest.mark.fast)

