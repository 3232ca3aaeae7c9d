"""The LM (`lm`, the paper's θ) on transformers: `kv` (KVEngine: prefill, decode, fixed point, crop, clone), `lm` (TorchLM,
a transformers model behind the LM interface), `batched` (the audit's batched decode), `pages` (K/V pages),
`models` (loading and the weights cache), `exact` (exactness settings and comparisons),
`runtime` (KVRuntime)."""

import os

# Buffers of 2 MB and more (a cache layer's buffer, a restore's pages) on transparent huge pages:
# PyTorch's CPU allocator reads this once, at its first large allocation. A restore writes hundreds
# of MB into fresh buffers, and huge pages cut its page faults (measured: the restore of a 4,000-token
# SmolLM2 prefix 0.95 s -> 0.70 s). It changes where buffers start (2 MB boundaries instead of
# 64 bytes), never what is computed in them. A value set by the user stands.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

