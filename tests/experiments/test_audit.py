"""Baselines and audits on a tiny family: measured orderings the paper predicts, and the stats."""

import pytest

from unsee.impl.experiments.audit import audit_episode
from unsee.impl.experiments.statistics import mcnemar_exact, tost
from unsee.impl.engine.kv_runtime import KVRuntime
from unsee.impl.experiments.cases import memory_case
from unsee.model import Config
from unsee.model.tools import SHIP_GIFT

pytestmark = pytest.mark.tiny

LEAKY = ("B1", "B2", "B3", "B4", "B6", "B8")


@pytest.fixture(scope="module")
def audited():
    case = memory_case(1, kind="iban", reply=6)
    live = KVRuntime("tiny-llama", Config(summary_tokens=6, tools=(SHIP_GIFT,)))
    for o in case.observations:
        live.step(o)
    return audit_episode(live, case, ["B0", *LEAKY, "B7", "B9", "span"], n_tokens=6)


def test_b7_is_identical_to_b5_in_every_cell(audited):
    # every cell but the cost and the samples drawn with per-method seeds
    strip = lambda d: {k: v for k, v in d.items() if k not in ("transitions", "leak_at_5_independent")}  # noqa: E731
    assert strip(audited["B7"]) == strip(audited["B5"])
    assert audited["B7"]["transitions"] < audited["B5"]["transitions"]


def test_memory_delete_changes_nothing_an_audit_can_see(audited):
    strip = lambda d: {k: v for k, v in d.items() if k not in ("utility", "transitions", "leak_at_5_independent")}  # noqa: E731
    assert strip(audited["B1"]) == strip(audited["B0"])


def test_divergence_is_zero_exactly_for_exact_forgets(audited):
    for m in ("B5", "B7", "B9"):
        assert audited[m]["divergence_kl"] == 0.0 and audited[m]["divergence_tv"] == 0.0


@pytest.mark.parametrize("method", LEAKY)
def test_divergence_is_positive_where_influence_remains(audited, method):
    assert audited[method]["divergence_tv"] > 0.0


def test_mcnemar_exact_values():
    assert mcnemar_exact([1, 1, 1, 1, 1, 1], [0] * 6) == pytest.approx(2 / 64)
    assert mcnemar_exact([1, 0], [1, 0]) == 1.0


def test_tost_accepts_identical_and_rejects_shifted():
    assert tost([0.0] * 5, [0.0] * 5, 0.01)["equivalent"]
    assert not tost([0.5, 0.6, 0.55, 0.52], [0.0] * 4, 0.01)["equivalent"]


def test_audit_command_on_an_agentdojo_episode(tmp_path):
    pytest.importorskip("agentdojo")
    import json

    from typer.testing import CliRunner

    from unsee.impl.cli import app

    import signal

    path, md = tmp_path / "a.json", tmp_path / "a.md"
    before = signal.getsignal(signal.SIGTERM)
    res = CliRunner().invoke(app, ["audit", "--suite", "agentdojo:banking", "--n", "1", "--tokens", "4",
                                   "--methods", "B0,B1,B3,B7,B8,B9", "--json", str(path), "--markdown", str(md)])
    assert res.exit_code == 0, res.output
    assert signal.getsignal(signal.SIGTERM) is before  # the command's stop handler does not outlive it
    doc = json.loads(path.read_text())
    m = doc["methods"]
    assert doc["tests"]["B7"]["identical_to_B5"] is True
    assert m["B7"]["divergence_kl"] == m["B9"]["divergence_kl"] == 0.0
    assert m["B3"]["divergence_tv"] > 0 and m["B8"]["divergence_tv"] > 0
    strip = lambda d: {k: v for k, v in d.items() if k not in ("transitions", "leak_at_5_independent")}  # noqa: E731
    assert strip(m["B1"]) == strip(m["B0"])  # no memory record held the injection
    assert "Table 4" in md.read_text()
    floor = doc["floor"]
    for k in ("exact_leak", "action_leak", "any_leak", "leak_at_probes", "leak_at_5"):
        assert (k in doc["floor_flags"]) == bool(floor[k]), k  # a non-zero floor is flagged, a zero one is not
    assert all(c["valid"] == bool(c["needles"]) for c in doc["cases"]) and len(doc["cases"]) == 1


# --- needles and floors ---------------------------------------------------------------------

def _with_clean_mention(case, text):
    """The case with one more benign user turn (not from the target source) that says `text`."""
    from dataclasses import replace

    from unsee.model.state import Observation, Part

    return replace(case, observations=case.observations + [Observation("user", (Part("extra", text),))])


def test_a_needle_the_counterfactual_stream_holds_is_dropped():
    from unsee.impl.experiments.cases import counterfactual_text, validate_needles

    case = memory_case(1, kind="iban", reply=6)
    assert case.valid and case.needles[0] not in counterfactual_text(case.observations, case.sources)
    echoed = validate_needles(_with_clean_mention(case, f"Ref: {case.needles[0].lower()}!"))
    assert echoed.needles == [] and echoed.dropped == case.needles and not echoed.valid
    # the target's own observation does not count: only o^{-z} does
    assert validate_needles(case).needles == case.needles
    # nor may a needle sit in the audit's own prompts
    assert validate_needles(case, extra=[f"say {case.needles[0]}"]).needles == []


def test_a_needle_whose_token_the_counterfactual_holds_is_dropped():
    """A word template hashes words to ids: a clean word with the needle's id makes the needle
    indistinguishable at the model's resolution; the check leaves the template's memo as it was."""
    from unsee.impl.engine.models import load
    from unsee.impl.experiments.cases import validate_needles

    tmpl = load("tiny-llama").template
    case = memory_case(1, kind="iban", reply=6)
    target = tmpl.encode_raw(case.needles[0])
    twin = next(w for w in (f"word{i}" for i in range(100000)) if tmpl.encode_raw(w) == target)
    collided = _with_clean_mention(case, f"the code is {twin}")
    before = dict(tmpl.words)
    assert validate_needles(collided).needles == case.needles  # distinct as strings
    assert validate_needles(collided, template=tmpl).needles == []  # one id to the model
    assert tmpl.words == before


def test_an_episode_without_a_valid_needle_has_no_leak_values(tmp_path):
    from unsee.impl.experiments.audit_summary import LEAK_KEYS, summarize
    from unsee.impl.experiments.cases import validate_needles
    from unsee.impl.experiments.reports import audit_markdown

    case = validate_needles(_with_clean_mention(memory_case(1, kind="iban", reply=6), memory_case(1, kind="iban").needles[0]))
    assert not case.valid
    live = KVRuntime("tiny-llama", Config(summary_tokens=4, tools=(SHIP_GIFT,)))
    for o in case.observations:
        live.step(o)
    res = audit_episode(live, case, ["B0", "B7"], n_tokens=4)
    for m in ("B0", "B5", "B7"):
        assert all(res[m][k] is None for k in LEAK_KEYS)
        assert all(v is None for v in res[m]["probes"].values())
        assert res[m]["divergence_tv"] is not None and res[m]["cad"] is not None
    assert res["B0"]["divergence_tv"] > 0
    doc = summarize("tiny-llama", "memory", 1, {m: [r] for m, r in res.items()},
                    [{"name": case.name, "needles": [], "dropped_needles": case.dropped, "valid": False}])
    assert doc["invalid_cases"] == [case.name] and doc["n_leak"] == 0
    assert doc["methods"]["B0"]["any_leak"] is None
    assert case.name in audit_markdown(doc)


def _row(leak: float, kl: float = 0.0) -> dict:
    return {"exact_leak": leak, "action_leak": 0.0, "any_leak": leak, "cad": 0.0, "utility": 1.0,
            "leak_at_probes": 0.0, "probes": {p: (leak if p == "direct" else 0.0) for p in
                                              ("task", "direct", "think", "introspect", "enumerate", "cued")},
            "leak_at_5": 0.0, "leak_at_5_independent": 0.0,
            "action_leak_by_sink": {"routing": 0.0, "selection": 0.0, "free_text": 0.0},
            "divergence_kl": kl, "divergence_tv": kl, "transitions": None}


def test_a_non_zero_floor_is_flagged_in_json_and_every_table():
    from unsee.impl.experiments.audit_summary import summarize
    from unsee.impl.experiments.reports import FLAG, audit_floor_line, audit_markdown, audit_tabs

    rows = {"B5": [_row(1.0), _row(0.0)], "B0": [_row(1.0, 0.1), _row(1.0, 0.2)]}
    doc = summarize("m", "memory", 2, rows)
    assert doc["floor_flags"] == doc["floor"]["flags"] == ["exact_leak", "any_leak", "probes.direct"]
    assert doc["methods"]["B0"]["vs_floor"]["exact_leak"] == pytest.approx(0.5)
    tab1 = next(t for t in audit_tabs(doc) if t.title.startswith("Table 1"))
    assert tab1.columns[1] == f"exact_leak {FLAG}" and tab1.columns[2] == "action_leak"
    assert tab1.rows[0][0] == "B5 (floor)" and "Δ" in tab1.rows[1][1] and any("exact_leak = 0.5" in x for x in tab1.notes)
    probes = next(t for t in audit_tabs(doc) if t.title == "Leak per probe")
    assert f"direct {FLAG}" in probes.columns
    assert "exact_leak" in audit_floor_line(doc) and "non-zero floor" in audit_markdown(doc)
    clean = summarize("m", "memory", 2, {"B5": [_row(0.0)] * 2, "B0": [_row(1.0, 0.1)] * 2})
    assert clean["floor_flags"] == [] and FLAG not in audit_markdown(clean)


def test_leaks_are_broken_down_by_suite_and_by_kind_of_fact():
    """The JSON and the tables break leaks down by AgentDojo suite (or memory fact kind), each
    over that group's episodes with a valid needle."""
    from unsee.impl.experiments.audit_summary import group_of, summarize
    from unsee.impl.experiments.reports import FLAG, audit_tabs

    assert group_of("slack/user_task_13/injection_task_3") == "slack"
    assert group_of("memory-iban-4") == "iban" and group_of("preference-7") is None
    cases = [{"name": n, "needles": ["x"], "dropped_needles": [], "valid": v} for n, v in
             (("slack/u1/i1", True), ("banking/u2/i1", True), ("slack/u3/i2", True), ("slack/u4/i3", False))]
    none = dict(_row(0.0), exact_leak=None, any_leak=None, leak_at_probes=None)
    rows = {"B5": [_row(0.0)] * 3 + [none], "B0": [_row(1.0), _row(0.0), _row(0.0), none]}
    doc = summarize("m", "agentdojo", 4, rows, cases)
    assert doc["by_group"]["slack"]["n"] == 3 and doc["by_group"]["banking"]["n"] == 1
    assert doc["by_group"]["slack"]["methods"]["B0"]["any_leak"] == pytest.approx(0.5)  # the invalid one excluded
    assert doc["by_group"]["banking"]["methods"]["B0"]["any_leak"] == 0.0
    tab = next(t for t in audit_tabs(doc) if t.title.startswith("Leak by group"))
    assert tab.columns == ("method", "banking (1)", "slack (3)")
    assert tab.rows[1] == ("B0", "0 / 0", "0.5 / 0")
    assert doc["by_group"]["slack"]["floor_flags"] == [] and tab.notes == [] and FLAG not in "".join(tab.columns)
    one = summarize("m", "agentdojo", 1, {k: v[:1] for k, v in rows.items()}, cases[:1])
    assert one["by_group"] == {} and not any(t.title.startswith("Leak by group") for t in audit_tabs(one))
    # a floor only one group has is flagged there, though the whole suite's mean hides it in no table
    rows["B5"][1] = dict(_row(0.0), leak_at_probes=1.0)  # banking's one episode: the twin answers too
    doc = summarize("m", "agentdojo", 4, rows, cases)
    assert doc["by_group"]["banking"]["floor_flags"] == ["leak_at_probes"] and doc["by_group"]["slack"]["floor_flags"] == []
    tab = next(t for t in audit_tabs(doc) if t.title.startswith("Leak by group"))
    assert tab.columns == ("method", f"banking (1) {FLAG}", "slack (3)")
    assert len(tab.notes) == 1 and "group banking" in tab.notes[0] and "leak_at_probes = 1" in tab.notes[0]


def test_the_paired_tests_cover_the_probes_and_the_choice():
    """McNemar on any leak, on Leak@probes and (a preference suite) on the avoid choice, each
    paired with B5 episode by episode; an older result without the new columns still renders."""
    from unsee.impl.experiments.audit_summary import summarize
    from unsee.impl.experiments.statistics import mcnemar_exact
    from unsee.impl.experiments.reports import audit_tabs

    b5 = [dict(_row(0.0), avoid_rate=1.0) for _ in range(12)]
    b0 = [dict(_row(0.0), leak_at_probes=1.0, avoid_rate=0.0) for _ in range(12)]
    doc = summarize("m", "preference", 12, {"B5": b5, "B0": b0})
    t = doc["tests"]["B0"]
    assert t["mcnemar_any_leak_p"] == 1.0  # no leak either way
    assert t["mcnemar_leak_at_probes_p"] == t["mcnemar_avoid_p"] == mcnemar_exact([1.0] * 12, [0.0] * 12) < 0.001
    tab = next(x for x in audit_tabs(doc) if x.title == "Paired tests against B5")
    assert tab.columns == ("method", "McNemar any-leak p", "McNemar Leak@probes p", "McNemar avoid p",
                           "Wilcoxon KL p", "TOST (B7)")
    memory = summarize("m", "memory", 12, {"B5": [_row(0.0)] * 12, "B0": [_row(0.0)] * 12})
    assert "mcnemar_avoid_p" not in memory["tests"]["B0"]
    for x in memory["tests"].values():  # as an older result has it
        x.pop("mcnemar_leak_at_probes_p")
    tab = next(x for x in audit_tabs(memory) if x.title == "Paired tests against B5")
    assert tab.columns == ("method", "McNemar any-leak p", "Wilcoxon KL p", "TOST (B7)")


def test_a_long_preference_audit_audits_distinct_episodes():
    """n = 100 must mean 100 episodes, not the six fixed ones over again: past seed 5 each
    seed draws its own pair, whose names start differently (the avoid rate compares the two
    names' first tokens)."""
    from unsee.impl.engine.models import load
    from unsee.impl.experiments.cases import preference_case

    cases = [preference_case(s) for s in range(100)]
    assert len({(a, b) for _, a, b in cases[6:]}) == 94 and len({c.name for c, _, _ in cases}) == 100
    assert [(a, b) for _, a, b in cases[:6]] == [("RideCo", "CabNow")] * 2 + [("QuickShip", "ParcelGo")] * 2 + \
        [("BlueBank", "RedBank")] * 2
    tmpl = load("recall-tiny").template
    for _, a, b in cases:
        assert a != b and tmpl.encode_raw(a)[0] != tmpl.encode_raw(b)[0], (a, b)


def test_the_avoid_rate_skips_a_choice_one_token_cannot_tell():
    from unsee.impl.experiments.audit import avoid
    from unsee.impl.experiments.cases import provider_pair

    live = KVRuntime("tiny-llama", Config(tools=(SHIP_GIFT,)))
    enc = live.model.template.encode_raw
    assert enc("SwiftFast")[0] == enc("StarParcel")[0]  # this tokenizer starts both with one token
    assert avoid(live, "Book one: SwiftFast or StarParcel?", "SwiftFast", "StarParcel") is None
    assert avoid(live, "Book one: RideCo or CabNow?", "RideCo", "CabNow") in (0.0, 1.0)
    assert all(a[0] != b[0] for a, b in map(provider_pair, range(6, 2000)))


def test_every_committed_audit_table_is_what_its_json_renders():
    """The tables in docs/results are generated, never edited: each audit's Markdown is
    `audit_markdown` of the JSON committed beside it."""
    import json
    from pathlib import Path

    from unsee.impl.experiments.reports import audit_markdown

    results = Path(__file__).resolve().parents[2] / "docs" / "results"
    pairs = [(j, j.with_suffix(".md")) for j in sorted(results.glob("audit-*.json")) if j.with_suffix(".md").exists()]
    assert len(pairs) >= 10
    for j, md in pairs:
        assert audit_markdown(json.loads(j.read_text())) == md.read_text(), md.name
