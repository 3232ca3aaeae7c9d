"""The real runtime and what is built on it, one folder per concern:

- `engine/`      the LM on transformers: the KV engine (`kv`), K/V pages, model loading, exactness
                 settings, and `KVRuntime` (the reference scaffold over a real model);
- `store/`       persistence: the SQLite session store, episode files, and the store's
                 operations (open, forget, check) with `Agent`, the API for agents that stay up;
- `organism/`    the model organisms (recall-tiny, -2, -3): data, training, evaluation, weights;
- `experiments/` the paper's evaluation: baselines, cases, AgentDojo, audits, benches, demo;
- `cli/`         the `unsee` command: parse, call, render.
"""

from __future__ import annotations


def __getattr__(name: str):
    if name == "Agent":  # the API for agents that stay up: `from unsee.impl import Agent`
        from unsee.impl.store.agent import Agent

        return Agent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
