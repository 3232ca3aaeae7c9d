"""pytest plugin (entry point `pytest11`): point the conformance kit at any runtime.

    pytest --pyargs unsee.specs.conformance --unsee-runtime=package.module:factory

`factory` is a callable returning a fresh runtime that implements
`unsee.specs.protocol.Runtime`; if it takes one argument it receives the drawn config
{"policy", "sampling", "seed"}. UNSEE_RUNTIME may stand in for the option. Nothing heavy
is imported at load time.
"""

from __future__ import annotations

import importlib
import inspect
import os
from types import MappingProxyType

import pytest

from unsee.specs.cache import cache_root


def pytest_addoption(parser):
    g = parser.getgroup("unsee", "unsee conformance kit")
    g.addoption("--unsee-runtime", default=os.environ.get("UNSEE_RUNTIME"),
                help="module:factory of the runtime to verify (or UNSEE_RUNTIME)")
    g.addoption("--unsee-max-examples", type=int, default=int(os.environ.get("UNSEE_MAX_EXAMPLES", "100")),
                help="random sessions per property (default 100)")
    g.addoption("--unsee-max-steps", type=int, default=int(os.environ.get("UNSEE_MAX_STEPS", "40")),
                help="longest session, in observations, of the one program in five that is long (default 40)")
    g.addoption("--unsee-seed", type=int, default=0, help="Hypothesis seed (default 0)")
    g.addoption("--unsee-shrink-seconds", type=float, default=float(os.environ.get("UNSEE_SHRINK_SECONDS", "20")),
                help="stop shrinking a failure's trace after this long (default 20 s): longer gives shorter traces")
    g.addoption("--unsee-profile", choices=sorted(PROFILES), default=os.environ.get("UNSEE_PROFILE", "default"),
                help="ci: every directed placement and 20 random sessions at a fixed seed (a PR's minute or two); "
                     "nightly: 2000 random sessions at a random seed, the examples found kept for the next run; "
                     "default: 100 at --unsee-seed")
    g.addoption("--unsee-failures", default=os.environ.get("UNSEE_FAILURES"),
                help="folder a failing session is written to, as a file the printed command replays "
                     "(default: unsee's cache, kit/failures)")
    g.addoption("--unsee-xfails", default=os.environ.get("UNSEE_XFAILS"),
                help="file of test names (one per line) expected to fail for this runtime")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """A kit run leaves nothing in the folder it runs from: Hypothesis' files (unless
    $HYPOTHESIS_STORAGE_DIRECTORY chooses their place) and pytest-benchmark's folder (when that
    plugin is installed and its storage was not chosen) go to unsee's cache. Only a run given a
    runtime (--unsee-runtime or $UNSEE_RUNTIME) is a kit run."""
    if not config.getoption("--unsee-runtime", None):
        return
    kit = cache_root() / "kit"
    if not os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        from hypothesis.configuration import set_hypothesis_home_dir

        set_hypothesis_home_dir(kit / "hypothesis")
    if getattr(config.option, "benchmark_storage", None) == "file://./.benchmarks":  # only with pytest-benchmark
        config.option.benchmark_storage = f"file://{kit / 'benchmarks'}"


# what each profile sets (None: the option's own value)
PROFILES = MappingProxyType({
    "default": MappingProxyType({}),
    "ci": MappingProxyType({"examples": 20, "seed": 0, "max_steps": 20, "shrink_seconds": 5.0}),
    "nightly": MappingProxyType({"examples": 2000, "seed": None, "max_steps": 40, "shrink_seconds": 60.0,
                                 "database": True}),
})


def run_settings(opt) -> dict:
    """The kit run's settings: the options, overridden by the profile's."""
    import random

    profile = PROFILES[opt("--unsee-profile") or "default"]
    out = {"examples": opt("--unsee-max-examples"), "seed": opt("--unsee-seed"), "max_steps": opt("--unsee-max-steps"),
           "shrink_seconds": opt("--unsee-shrink-seconds"), "database": None}
    out.update({k: v for k, v in profile.items() if k != "database" and v is not None})
    if "seed" in profile and profile["seed"] is None:
        out["seed"] = random.randrange(2**32)
    if profile.get("database"):
        out["database"] = str(cache_root() / "kit" / "examples")
    return out


def load_factory(spec: str):
    if not spec or ":" not in spec:
        raise ValueError(f"--unsee-runtime must look like package.module:factory, got {spec!r}")
    mod, _, attr = spec.partition(":")
    obj = importlib.import_module(mod)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def factory_for(spec: str):
    """Adapt the user's factory to the harness: config dict → zero-argument factory."""
    f = load_factory(spec)
    try:
        takes_config = len(inspect.signature(f).parameters) >= 1
    except (TypeError, ValueError):
        takes_config = False
    return (lambda cfg: (lambda: f(cfg))) if takes_config else (lambda cfg: f)


def pytest_collection_modifyitems(config, items):
    path = config.getoption("--unsee-xfails")
    if not path:
        return
    import pytest

    names = {line.strip() for line in open(path) if line.strip() and not line.startswith("#")}
    for item in items:
        if item.name in names or item.originalname in names:
            item.add_marker(pytest.mark.xfail(reason=f"listed in {path}", strict=True))


COVERAGE_KEY = "unsee_coverage"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line per kit run: how many forgets each scenario got (a run that never exercised
    one cannot vouch for it)."""
    doc = getattr(config, COVERAGE_KEY, None)  # set on pytest's config by a kit run (`conformance`) only
    if doc is None:
        return
    cov = ", ".join(f"{k}: {v}" for k, v in doc["coverage"].items())
    terminalreporter.write_line(f"unsee kit: {doc['examples']} sessions ({doc.get('directed', 0)} directed, "
                                f"{doc['examples'] - doc.get('directed', 0)} random; profile "
                                f"{doc.get('profile', 'default')}), {doc['forgets']} forgets in "
                                f"{doc['seconds']} s; forgets per scenario: {cov}")
    targets = ", ".join(f"{k}: {v['forgets']} ({v['share']:.0%})" for k, v in doc.get("targets", {}).items())
    if targets:
        terminalreporter.write_line(f"unsee kit: coverage targets, forgets that hit each (share of all forgets): {targets}")
    seal = doc.get("seal")
    if seal:
        never = ", ".join(seal["never_edited"]) or "none"
        terminalreporter.write_line(f"unsee kit: seal: {seal['databases_edited']} databases edited column by column, "
                                    f"{len(seal['refused'])} of {seal['columns']} columns edited and refused; never "
                                    f"edited (their tables held no row): {never}")
