"""The real runtime and what is built on it, one folder per concern:

- `engine/`      θ on transformers: the KV engine (`kv`), K/V pages, model loading, exactness
                 settings, and `KVRuntime` (the reference scaffold over a real model);
- `store/`       persistence: the SQLite session store, episode files, and the store's
                 operations (open, forget, check) with `Agent`, the API for agents that stay up;
- `experiments/` the paper's evaluation: baselines, cases, AgentDojo, audits, benches, demo;
- `cli.py`       the `unsee` command: parse, call, render.

The flat module names of earlier releases (`unsee.impl.agent`, `unsee.impl.bench`, ...) still
import, with a DeprecationWarning naming the new one.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# old module → the modules that now hold its names
MOVED = {
    "agent": ("unsee.impl.engine.runtime", "unsee.impl.store.session"),
    "pages": ("unsee.impl.engine.pages",),
    "models": ("unsee.impl.engine.models",),
    "exact": ("unsee.impl.engine.exact",),
    "episode": ("unsee.impl.store.episode",),
    "episodes": ("unsee.impl.experiments.cases",),
    "baselines": ("unsee.impl.experiments.baselines",),
    "agentdojo": ("unsee.impl.experiments.agentdojo",),
    "audit": ("unsee.impl.experiments.audit",),
    "bench": ("unsee.impl.experiments.bench",),
    "bench_store": ("unsee.impl.experiments.bench_store",),
    "demo": ("unsee.impl.experiments.demo",),
}


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports `unsee.impl.<old>` as a module holding the public names of its new homes."""

    def find_spec(self, name, path=None, target=None):
        prefix, _, old = name.rpartition(".")
        if prefix == __name__ and old in MOVED:
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        homes = MOVED[module.__name__.rpartition(".")[2]]
        warnings.warn(f"{module.__name__} moved to {' and '.join(homes)}", DeprecationWarning, stacklevel=2)
        for home in homes:
            mod = importlib.import_module(home)
            module.__dict__.update({k: v for k, v in vars(mod).items() if not k.startswith("__")})


if not any(isinstance(f, _Moved) for f in sys.meta_path):
    sys.meta_path.append(_Moved())


def __getattr__(name: str):
    if name == "Agent":  # the API for agents that stay up: `from unsee.impl import Agent`
        from unsee.impl.store.session import Agent

        return Agent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
