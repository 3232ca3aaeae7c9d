"""A runtime with a consequential tool, written from docs/verify-your-runtime.md alone.

Where `tiny_runtime.py` keeps every boundary and fires nothing, this one fires side effects:
an observation with tool "send" plans a call whose arguments are a JSON object holding the
last two words of the transcript, and the next transition commits it to `world`. A replay
commits nothing: the forget compares what the replay would send with what was sent, and
reports the difference as compensation. Its records are plain dicts (receipt, world entries,
compensation entries), and it keeps only the checkpoints its policy promises.

Verify it (from docs/examples):
    PYTHONPATH=. python -m pytest --pyargs unsee.specs.conformance --unsee-runtime=ledger_runtime:LedgerRuntime -p no:cacheprovider
"""

import hashlib
import json

import networkx as nx


def h(*xs):
    return hashlib.sha256(json.dumps(xs, sort_keys=True, default=str).encode()).hexdigest()[:12]


def F(s, obs):
    """One transition on a plain dict state; returns (new state, the side effects it commits)."""
    t = s["turn"] + 1
    s = {**s, "turn": t, "words": list(s["words"]), "memory": list(s["memory"]), "nodes": list(s["nodes"]),
         "ledger": list(s["ledger"])}
    made = []
    fired = []
    prev = s["last"]  # the previous transition's turn node
    fields = []
    for i, p in enumerate(obs.visible):
        s["nodes"].append((f"{t}.f{i}", "field", t, [], [p.source]))
        fields.append(f"{t}.f{i}")
        s["words"] += p.text.split()
        if obs.kind == "memory":
            s["memory"].append(p.text)
    if s["plan"] is not None:  # commit what the previous transition planned (after the fields: edges from them)
        entry = {"call_id": f"call-t{t}", "tool": "send", "args": {"to": "bob", "text": s["plan"]}, "turn": t}
        s["ledger"].append(entry)
        fired.append(entry)
        s["nodes"].append((f"{t}.commit", "commit", t, [f"{t - 1}.plan"] + fields, []))
        made.append(f"{t}.commit")
        s["plan"] = None
    for _ in range(obs.reply):
        s["words"].append("w" + h(s["words"])[:3])
    if obs.tool == "lookup":
        s["words"].append("found" + h(s["words"])[:2])
    parents = fields + ([prev] if prev else []) + made
    s["nodes"].append((f"{t}.turn", "turn", t, parents, []))
    s["last"] = f"{t}.turn"
    if obs.tool == "send":
        s["plan"] = " ".join(s["words"][-2:])
        s["nodes"].append((f"{t}.plan", "plan", t, [f"{t}.turn"], []))
    if obs.compact:
        s["words"] = s["words"][-3:]
        s["memory"].append(" ".join(s["words"]))
    return s, fired


INIT = {"turn": 0, "words": [], "memory": [], "nodes": [], "ledger": [], "plan": None, "last": None}


class LedgerRuntime:
    def __init__(self, config):
        self.policy = config["policy"]
        self.reset()

    def reset(self):
        self.states = {0: INIT}
        self.state = INIT
        self.log = []
        self.invocations = 0
        self.world = []

    def wants(self, b, log):
        """Checkpoint boundary b (before transition b+1) of `log`?"""
        if self.policy == "every" or b == 0:
            return True
        if self.policy == "start":
            return False
        o = log[b]  # o_{b+1}
        return o.kind == "memory" or o.compact or (b >= 1 and log[b - 1].tool == "send")

    def _step(self, obs, fire=True):
        """One transition; checkpoint the boundary before it if the policy promises it; fire its
        side effects into `world` unless this is a replay."""
        b = len(self.log)
        log = self.log + [obs]
        if self.wants(b, log):
            self.states[b] = self.state
        self.state, fired = F(self.state, obs)
        self.log = log
        self.invocations += 1
        if fire:
            self.world += fired
        return fired

    def step(self, obs):
        self._step(obs)

    def forget(self, sources, method="B7", checkpoint=None):
        """Restore the checkpoint c, replay the sanitized log from there without firing, and
        report what the replay would send differently from what was sent."""
        z = set(sources)
        tau = next(t for t, o in enumerate(self.log, 1) if o.sources & z)
        T = len(self.log)
        if method == "B5":
            c = 0
        elif checkpoint is not None:
            c = checkpoint
        else:
            c = max(b for b in self.states if b <= tau - 1)
        clean = [o.without(z) for o in self.log]
        self.state = self.states[c]
        self.states = {b: s for b, s in self.states.items() if b <= c}
        self.log = clean[:c]
        replayed = clean[c:]
        made = []
        for o in replayed:
            made += self._step(o, fire=False)
        real = {e["call_id"]: e for e in self.world if e["turn"] > c}
        twin = {e["call_id"]: e for e in made}
        comp, dedup = [], []
        for cid in sorted(set(real) | set(twin)):
            r, w = real.get(cid), twin.get(cid)
            if r and w and (r["tool"], r["args"]) == (w["tool"], w["args"]):
                dedup.append(cid)
                continue
            comp.append({"call_id": cid, "tool": (w or r)["tool"], "args": w and w["args"],
                         "committed": r and r["args"],
                         "reason": "not committed" if r is None else
                         "counterfactual makes no such call" if w is None else "arguments differ"})
        return {"tau": tau, "T": T, "checkpoint": c, "transitions": T - c, "compensation": comp,
                "replayed": replayed, "method": method, "sources": list(sources), "deduplicated": dedup}

    def digest(self):
        s = self.state
        return {k: h(s[k]) for k in ("turn", "words", "memory", "nodes", "ledger", "plan", "last")}

    def graph(self):
        nodes = self.state["nodes"]
        g = nx.DiGraph([(p, nid) for nid, _, _, parents, _ in nodes for p in parents])
        g.add_nodes_from((nid, {"type": typ, "turn": turn, "source_ids": set(srcs)}) for nid, typ, turn, _, srcs in nodes)
        return g

    observations = property(lambda self: list(self.log))
    checkpoints = property(lambda self: sorted(self.states))

    def layers(self):
        return {"transcript": [" ".join(self.state["words"])], "memory": list(self.state["memory"]),
                "plan": [self.state["plan"] or ""], "ledger": [json.dumps(e) for e in self.state["ledger"]]}
