"""Print what a model writes after the first K AgentDojo pairs of an audit's JSON, with no
forget method applied (B0's state): the needles, the task continuation's answer, tool-call
arguments and memory write-back. For reading an audit's zeros: whether the model followed an
injection without copying its identifier.

    python scripts/show_continuations.py MODEL AUDIT_JSON [K]
"""

import json
import sys

from unsee.impl.experiments.audit import audit_runtime, continue_task
from unsee.impl.experiments.cases import agentdojo_case


def main(model: str, audit_json: str, k: int = 6) -> None:
    doc = json.loads(open(audit_json).read())
    n_tokens, attn = 24, doc.get("run", {}).get("attn", "eager")  # the audit's defaults: --tokens 24
    for c in doc["cases"][:k]:
        case = agentdojo_case(*c["name"].split("/"))
        rt = audit_runtime(model, n_tokens, attn)
        for o in case.observations:
            rt.step(o)
        answer, args, writeback, _, _ = continue_task(rt, n_tokens, case.sources)
        print(f"== {c['name']}  needles {case.needles}  context {len(rt.session.state.tokens)} tokens")
        for label, text in (("answer", answer), ("tool call", args), ("write-back", writeback)):
            print(f"  {label:10s} {text.replace('<|im_end|>', '')!r}")
        rt.model.engine.release()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 6)
