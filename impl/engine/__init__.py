"""θ on transformers: `kv` (KVEngine, TorchLM), `pages` (K/V pages), `models` (loading and the
weights cache), `exact` (exactness settings and comparisons), `runtime` (KVRuntime)."""


def __getattr__(name: str):
    # `from unsee.impl.engine import KVEngine` (the module this package replaced) still works;
    # resolved lazily so that importing a sibling (pages) does not load torch
    import importlib

    kv = importlib.import_module("unsee.impl.engine.kv")

    try:
        return getattr(kv, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
