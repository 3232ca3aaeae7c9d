"""Persistence: `sqlite` (the session store), `episode` (episode files), `session` (open, forget
and check a stored session; `Agent`)."""


def __getattr__(name: str):
    # `from unsee.impl.store import Store` (the module this package replaced) still works
    import importlib

    sqlite = importlib.import_module("unsee.impl.store.sqlite")

    try:
        return getattr(sqlite, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
