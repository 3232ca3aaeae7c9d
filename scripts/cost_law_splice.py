"""B7's cost against T−τ+1 at the agent shape, with and without drafts (recorded replies).

Without drafts it is the splice's own cost law (every post-τ reply decoded); with them it
also depends on which replies the target changed. Usage:
    .venv/bin/python scripts/cost_law_splice.py [MODEL] [T]
"""

import json
import sys

from unsee.impl.experiments.bench_sessions import agent_session, live_session, sweep_taus
from unsee.impl.experiments.bench_sweeps import fit
from unsee.model.replay import selective_replay

model = sys.argv[1] if len(sys.argv) > 1 else "tiny-llama"
T = int(sys.argv[2]) if len(sys.argv) > 2 else 56
rows = []
for tau in sweep_taus("agent", T):
    obs, _ = agent_session(T, tau, 0.0, 8)
    live = live_session(model, obs, 8)
    row = {"suffix": T - tau + 1}
    for drafts in (False, True):
        rt = live.branch()
        e = rt.engine
        p0, d0, f0 = e.tokens_prefilled, e.tokens_decoded, e.forwards
        rt.session, r = selective_replay(rt.session, ["z"], drafts=drafts)
        row["drafts" if drafts else "splice"] = {"recomputed": e.tokens_prefilled - p0 + e.tokens_decoded - d0,
                                                 "forwards": e.forwards - f0, "decoded": e.tokens_decoded - d0}
    rows.append(row)
xs = [r["suffix"] for r in rows]
doc = {"model": model, "T": T, "rows": rows,
       "fit": {k: {m: fit(xs, [r[k][m] for r in rows]) for m in ("recomputed", "forwards")}
               for k in ("splice", "drafts")}}
print(json.dumps(doc, indent=1))
