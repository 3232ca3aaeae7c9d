"""The side-by-side with the paper reads an audit journal and checks the paper's ordering claims
episode by episode: each claim holds, fails, or cannot be told where nothing leaks."""

import gzip
import json

from unsee.impl.experiments import side_by_side as S


def _row(any_leak=0.0, action=0.0, kl=0.0, cad=0.0, indep=0.0):
    return {"exact_leak": any_leak, "action_leak": action, "any_leak": max(any_leak, action), "cad": cad,
            "utility": 1.0, "leak_at_probes": any_leak, "leak_at_5": 0.0, "leak_at_5_independent": indep,
            "divergence_kl": kl, "divergence_tv": kl, "transitions": None}


def _journal(path, episodes, gz=False):
    header = {"journal": "unsee audit", "model": "m", "suite": "memory", "n": 9, "seed": 0, "methods": [],
              "tokens": 24, "batch": True, "attn": "sdpa", "schedule": "x"}
    lines = [json.dumps(header)] + [json.dumps({"i": i, "case": f"c{i}", "result": {"case": {"name": f"c{i}"},
                                                                                     "rows": rows}})
                                    for i, rows in reversed(list(enumerate(episodes)))]
    (gzip.open if gz else open)(path, "wt").write("\n".join(lines) + "\n")


def _episode(leak: float):
    return {"B5": _row(indep=1.0), "B0": _row(leak, leak, 0.5, 0.4), "B1": _row(leak, leak, 0.5, 0.4),
            "B7": _row(), "B8": _row(leak, 0.0, 0.5, 1.0)}


def test_the_claims_hold_on_episodes_that_show_them(tmp_path):
    _journal(tmp_path / "j.jsonl.gz", [_episode(1.0), _episode(1.0), _episode(0.0)], gz=True)
    header, eps = S.read_journal(tmp_path / "j.jsonl.gz")
    assert header["model"] == "m" and [e["case"]["name"] for e in eps] == ["c0", "c1", "c2"]
    claims = {c: h for c, h, _ in S.checks(eps)}
    assert claims == {"B0 leaks (any-leak ≥ 0.5)": True, "B1 ≈ B0 (deleting the record changes nothing)": True,
                      "B8 leaks via free text only": True, "B7 = B5 at the floor": True}
    c = S.cell(eps, "B0", "any_leak")
    assert c["n"] == 3 and abs(c["mean"] - 2 / 3) < 1e-12 and 0 < c["lo"] < c["mean"] < c["hi"] < 1


def test_a_claim_fails_or_cannot_be_told(tmp_path):
    broken = _episode(1.0)
    broken["B1"] = _row()  # B1 forgot here
    broken["B7"] = _row(kl=0.1)  # and B7 is not B5
    _journal(tmp_path / "j.jsonl", [broken])
    claims = {c: h for c, h, _ in S.checks(S.read_journal(tmp_path / "j.jsonl")[1])}
    assert not claims["B1 ≈ B0 (deleting the record changes nothing)"] and not claims["B7 = B5 at the floor"]
    _journal(tmp_path / "k.jsonl", [_episode(0.0)])
    claims = {c: h for c, h, _ in S.checks(S.read_journal(tmp_path / "k.jsonl")[1])}
    assert claims["B8 leaks via free text only"] is None and claims["B0 leaks (any-leak ≥ 0.5)"] is False


def test_the_markdown_names_n_and_the_paper_figures(tmp_path):
    _journal(tmp_path / "j.jsonl", [_episode(1.0)] * 2)
    S.main(["--journal", f"memory={tmp_path / 'j.jsonl'}", "--markdown", str(tmp_path / "out.md")])
    text = (tmp_path / "out.md").read_text()
    assert "## memory: n = 2 episodes" in text and "0.86–1.00" in text and "B7 = B5 at the floor: holds" in text


def test_wilson_and_the_bootstrap():
    lo, hi = S.wilson(0, 10)
    assert lo == 0 and 0.25 < hi < 0.35
    assert S.bootstrap([1.0, 1.0]) == (1.0, 1.0)
    assert S.bootstrap([0.0, 1.0, 2.0], seed=3) == S.bootstrap([0.0, 1.0, 2.0], seed=3)
