"""Test vectors: sessions, forget requests and the expected results, generated from the
reference model, for runtimes that cannot run Hypothesis (other languages, other stacks).

Format (specs/vectors/vectors.json, a list):

    {"id": "v007",
     "config": {"policy": "every", "sampling": bool, "seed": int},
     "session": [Observation.to_json(), ...],          # one per transition, T of them
     "forget": ["z1", ...],                             # sources, one forget request
     "method": "B7" | "B5",                             # optional (default B7)
     "checkpoint": int,                                 # optional: a forced splice point c < τ
     "expect": {"tau": int, "T": int, "checkpoint": int,
                "transitions": int,                     # B7 invocations of F (T − checkpoint)
                "full_reset_transitions": int,          # T
                "counterfactual": "<sha256 of o^{-z} as JSON>",
                "tainted_fields": [[turn, source], ...]}}

Only implementation-independent facts are expected: they follow from the stream and the
checkpoint policy, not from the model's tokens. `run_vectors` returns the ids it ran, so a
consumer can prove no vector was skipped.
"""

from __future__ import annotations

import hashlib
import json
import random
from importlib import resources
from pathlib import Path

import networkx as nx

from unsee.model.state import Observation, Part
from unsee.specs import oracle
from unsee.specs.protocol import call, checked
from unsee.specs.statements import drive, graph_rows

PATH = Path(__file__).parent / "vectors" / "vectors.json"
WORDS = ("alice", "elm", "street", "iban", "DE89", "budget", "friday", "ok", "send", "report")


def stream_digest(observations) -> str:
    return hashlib.sha256(json.dumps([o.to_json() for o in observations], sort_keys=True).encode()).hexdigest()


def _random_session(rng: random.Random) -> tuple[list[Observation], list[str]]:
    T = rng.randint(2, 9) if rng.random() < 0.75 else rng.randint(10, 24)
    obs, targets = [], []
    for t in range(1, T + 1):
        kind = rng.choice(("user", "user", "memory", "tool", "system"))
        parts = [Part(f"s{t}", " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 4))))]
        if rng.random() < 0.3:
            z = rng.choice(("z1", "z2"))
            parts.insert(rng.randint(0, 1), Part(z, " ".join(rng.choice(WORDS) for _ in range(3))))
            if rng.random() < 0.3:  # the value z changed: the counterfactual shows this instead
                parts.append(Part(f"s{t}.alt", rng.choice(WORDS), instead_of=z))
            targets.append(z)
        obs.append(Observation(kind, tuple(parts), rng.randint(0, 3), rng.choice((None, None, "lookup", "send")),
                               rng.random() < 0.1))
    if not targets:
        at = rng.randint(1, T)
        obs[at - 1] = Observation("memory", (Part("z1", "alice lives at 12 elm street"),))
        targets.append("z1")
    forget = sorted(set(rng.sample(sorted(set(targets)), k=rng.randint(1, len(set(targets))))))
    return obs, forget


def generate(n: int = 40, seed: int = 0) -> list[dict]:
    from unsee.specs.reference import ReferenceRuntime
    from unsee.model.state import Config

    rng = random.Random(seed)
    out = []
    for i in range(n):
        obs, forget = _random_session(rng)
        # the every-turn policy: then the splice point (τ−1) does not depend on the runtime's scaffold
        cfg = {"policy": "every", "sampling": rng.random() < 0.3,
               "seed": rng.randint(0, 999)}
        rt = ReferenceRuntime(Config(sampling=cfg["sampling"], seed=cfg["seed"]), cfg["policy"])
        drive(rt, obs)
        g = rt.graph()
        fields = sorted([d["turn"], src] for n_, d in g.nodes(data=True) if g.in_degree(n_) == 0
                        for src in d["source_ids"] if src in forget)
        tau = oracle.first_entry(obs, forget)
        method, checkpoint = ("B5", None) if i % 4 == 1 else ("B7", None)
        if i % 4 == 2 and tau > 1:
            checkpoint = rng.randint(0, tau - 2)  # every boundary is a checkpoint under "every"
        r = rt.forget(forget, method=method, checkpoint=checkpoint)
        extra = ({"method": method} if method != "B7" else {}) | ({"checkpoint": checkpoint} if checkpoint is not None else {})
        out.append({"id": f"v{i:03d}", "config": cfg, "session": [o.to_json() for o in obs], "forget": forget, **extra,
                    "expect": {"tau": r.tau, "T": r.T, "checkpoint": r.checkpoint, "transitions": r.transitions,
                               "full_reset_transitions": len(obs),
                               "counterfactual": stream_digest(oracle.counterfactual(obs, forget)),
                               "tainted_fields": fields}})
    return out


def load_vectors(path: Path | None = None) -> list[dict]:
    if path is None:
        return json.loads(resources.files("unsee.specs").joinpath("vectors/vectors.json").read_text())
    return json.loads(Path(path).read_text())


def check_vector(factory, v: dict) -> None:
    obs = [Observation.from_json(o) for o in v["session"]]
    e = v["expect"]
    rt = checked(call(factory, "factory()", "construction"), "the runtime under test")
    drive(rt, obs)
    g = rt.graph()
    roots = [n for n, d in g.nodes(data=True) if g.in_degree(n) == 0 and d["source_ids"] & set(v["forget"])]
    got_fields = sorted([g.nodes[n]["turn"], s] for n in roots for s in g.nodes[n]["source_ids"] if s in v["forget"])
    assert got_fields == e["tainted_fields"], f"z's fields {got_fields}, expected {e['tainted_fields']}"
    taint = set(roots).union(*(nx.descendants(g, n) for n in roots)) if roots else set()
    early = sorted(n for n in taint if g.nodes[n]["turn"] < e["tau"])
    assert not early, f"artifacts before τ={e['tau']} are tainted: {early[:3]}"
    assert oracle.first_entry(obs, v["forget"]) == e["tau"]
    before = rt.invocations
    r = rt.forget(list(v["forget"]), method=v.get("method", "B7"), checkpoint=v.get("checkpoint"))
    for k in ("tau", "T", "checkpoint", "transitions"):
        assert getattr(r, k) == e[k], f"{k} = {getattr(r, k)}, expected {e[k]}"
    assert rt.invocations - before == e["transitions"], "the invocation counter disagrees with the receipt"
    assert stream_digest(list(rt.observations)) == e["counterfactual"], "the log is not o^{-z}"
    twin = checked(call(factory, "factory()", "construction of the twin"), "the twin (a fresh runtime driven over o^-z)")
    drive(twin, oracle.counterfactual(obs, v["forget"]))
    assert twin.invocations == e["full_reset_transitions"]
    a, b = rt.digest(), twin.digest()
    layers = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    assert not layers, f"the forget differs from a full reset over o^-z in layers {layers}"
    assert graph_rows(rt.graph()) == graph_rows(twin.graph()), "graph() after the forget is not the twin's G^-z_T"


def run_vectors(factory_for, vectors) -> dict:
    ran, failures = [], []
    for v in vectors:
        try:
            check_vector(factory_for(v["config"]), v)
        except AssertionError as e:
            how = v.get("method", "B7") + (f" at checkpoint {v['checkpoint']}" if "checkpoint" in v else "")
            failures.append({"id": v["id"], "message": f"{e} (session of T={len(v['session'])}, forget "
                                                       f"{v['forget']} by {how}, config {v['config']})"})
        ran.append(v["id"])
    return {"ran": sorted(ran), "failures": failures}


if __name__ == "__main__":  # regenerate: python -m unsee.specs.vectors
    PATH.parent.mkdir(exist_ok=True)
    PATH.write_text(json.dumps(generate(), indent=1) + "\n")
    print(f"wrote {PATH}")
