"""Where unsee keeps what it computes once (converted weights, self-test results, the kit's
Hypothesis files). Imports nothing heavy: the kit's plugin and the engine both read it."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """unsee's cache: $UNSEE_CACHE_DIR, else $XDG_CACHE_HOME/unsee, else ~/.cache/unsee."""
    root = os.environ.get("UNSEE_CACHE_DIR")
    if not root:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "unsee"
    return Path(root)
