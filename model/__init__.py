"""The reference transition system: the specification of unsee that runs.

Pure Python, immutable values, no torch. `step` is F of Eq. (1); `selective_replay` is
Algorithm 1 (B7); `full_reset` is B5. `ReferenceRuntime` adapts it to the runtime
protocol in `unsee.specs` so every spec runs against it.
"""

from unsee.model.state import (  # noqa: F401
    CONSEQUENTIAL_TOOLS, KINDS, READ_ONLY_TOOLS, TOOLS, Artifact, Block, Config, LedgerEntry,
    Meter, Observation, Part, State, ToolCall, initial_state, layer_digests, step,
)
from unsee.model.session import (  # noqa: F401
    POLICIES, Checkpoint, Receipt, Session, UnknownSource, UnseeError, append, choose_checkpoint,
    counterfactual_stream, first_entry, full_reset, locate_source, new_session, provenance_graph,
    replay_tools, restore, run, sanitize, selective_replay, suffix_closure, taint_closure,
)
from unsee.model.runtime import ReferenceRuntime  # noqa: F401
