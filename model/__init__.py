"""The reference transition system: the specification of unsee that runs.

Pure Python, immutable values, no torch. `step` is F of Eq. (1) (`state`); `plan_forget` is
Algorithm 1's lines 1–4 and `compensation` its line 8's report (`plan`); `selective_replay` is
Algorithm 1 (B7) and `full_reset` is B5 (`replay`); `Receipt` is what a forget reports (`receipt`).
The runtime protocol over it is `unsee.specs.reference.ReferenceRuntime`.
"""

from unsee.model.errors import UnknownSource, UnseeError  # noqa: F401
from unsee.model.state import (  # noqa: F401
    CONSEQUENTIAL_TOOLS, KINDS, READ_ONLY_TOOLS, TOOLS, Artifact, Block, Config, LedgerEntry,
    Observation, Part, State, ToolCall, initial_state, layer_digests, step,
)
from unsee.model.plan import (  # noqa: F401
    Checkpoint, ForgetPlan, Witness, choose_checkpoint, compensation, first_entry, locate_source, plan_forget,
    provenance_graph, replay_tools, suffix_closure, taint_closure,
)
from unsee.model.receipt import Effects, Receipt, Work, make_receipt, receipt_json  # noqa: F401
from unsee.model.replay import (  # noqa: F401
    POLICIES, Session, append, counterfactual_stream, full_reset, new_session, restore, run, sanitize,
    selective_replay,
)
