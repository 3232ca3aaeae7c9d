"""θ on transformers: `kv` (KVEngine, TorchLM), `pages` (K/V pages), `models` (loading and the
weights cache), `exact` (exactness settings and comparisons), `runtime` (KVRuntime)."""
