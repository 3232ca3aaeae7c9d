"""The LM (`lm`, the paper's θ) on transformers: `kv` (KVEngine: prefill, decode, fixed point, crop, clone), `lm` (TorchLM,
a transformers model behind the LM interface), `batched` (the audit's batched decode), `pages` (K/V pages),
`models` (loading and the weights cache), `exact` (exactness settings and comparisons),
`runtime` (KVRuntime)."""
