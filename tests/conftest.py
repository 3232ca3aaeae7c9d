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
