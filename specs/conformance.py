"""The conformance suite: run with `pytest --pyargs unsee.specs.conformance --unsee-runtime=…`.

Every paper statement is checked on random sessions driven through the runtime under test,
plus the shipped test vectors. A failure prints a short, copy-pasteable trace.
"""

from __future__ import annotations

import pytest

from unsee.specs.cache import cache_root
from unsee.specs.harness import verify
from unsee.specs.plugin import COVERAGE_KEY, factory_for, run_settings
from unsee.specs.replay import command, write_failure


@pytest.fixture(scope="session")
def runtime_spec(request) -> str:
    spec = request.config.getoption("--unsee-runtime")
    if not spec:
        pytest.fail("no runtime given: pass --unsee-runtime=package.module:factory (or set UNSEE_RUNTIME)")
    return spec


def test_every_statement_holds_on_random_sessions(request, runtime_spec):
    opt = request.config.getoption
    run = run_settings(opt)
    doc = verify(factory_for(runtime_spec), examples=run["examples"], seed=run["seed"], max_steps=run["max_steps"],
                 shrink_seconds=run["shrink_seconds"], database=run["database"])
    doc["profile"] = opt("--unsee-profile") or "default"
    setattr(request.config, COVERAGE_KEY, doc)
    if doc["failures"]:
        where = opt("--unsee-failures") or cache_root() / "kit" / "failures"
        reports = []
        for k, f in enumerate(doc["failures"], 1):
            trace = "\n    ".join(f["trace"])
            path = write_failure(f, runtime_spec, where)
            reports.append(f"failure {k} of {len(doc['failures'])}: {f['message']}\nshrunk trace ({f['length']} steps), "
                           f"runnable with `factory` your runtime's factory:\n    {trace}\n"
                           f"the session is in {path}; replay it alone with:\n    {command(path, runtime_spec)}")
        pytest.fail("\n\n".join(reports), pytrace=False)
    assert doc["forgets"] > 0, "no forget was exercised"
    assert doc["exact"] == doc["optimal_invocations"] == doc["forgets"]
    missed = [k for k, v in doc["targets"].items() if v["forgets"] == 0]
    assert not missed, f"the run never reached {missed}: it cannot vouch for them (raise --unsee-max-examples)"


def test_shipped_vectors(runtime_spec):
    from unsee.specs.vectors import load_vectors, run_vectors

    vectors = load_vectors()
    report = run_vectors(factory_for(runtime_spec), vectors)
    assert report["ran"] == sorted(v["id"] for v in vectors), "some vectors were not run"
    if report["failures"]:
        first = report["failures"][0]
        pytest.fail(f"vector {first['id']}: {first['message']}", pytrace=False)
