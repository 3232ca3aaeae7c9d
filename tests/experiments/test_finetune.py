"""`unsee.impl.organism.finetune` on a small base (recall-tiny, whose tokenizer encodes any text):
a LoRA run is deterministic, a run stopped after a checkpoint and started again with the same
command ends with the same adapter, the base model in the process cache is left untouched, and
the card is written from the training record; the AgentDojo stratified sample takes the four
suites in turn."""

import json

import pytest
import torch

from unsee.impl.organism import finetune as F
from unsee.impl.organism import lora

pytestmark = pytest.mark.tiny

BASE = "recall-tiny"
RUN = dict(steps=3, per_step=1, warmup=1, rank=2, alpha=4.0, max_len=512, log=lambda line: None)


@pytest.fixture
def threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)
    torch.use_deterministic_algorithms(False)


def test_a_lora_run_is_deterministic_and_leaves_the_cached_base_alone(threads):
    from unsee.impl.engine.models import load, weights_digest

    before = weights_digest(load(BASE).model)
    a, b = (F.finetune(BASE, None, **RUN) for _ in range(2))
    assert a["losses"] == b["losses"] and a["steps"] == 3
    assert all(torch.equal(a["adapter"][k], b["adapter"][k]) for k in a["adapter"])
    assert any(v.abs().sum() > 0 for k, v in a["adapter"].items() if k.endswith(".B"))  # it trained
    assert weights_digest(load(BASE).model) == before == a["base_weights_sha256"]
    assert not any(isinstance(m, lora.LoRALinear) for m in load(BASE).model.modules())


def test_a_stopped_run_resumes_from_its_checkpoint_to_the_same_adapter(tmp_path, threads):
    whole = F.finetune(BASE, tmp_path / "whole", **RUN)

    class Stop(Exception):
        pass

    def stop_at_step_2(line):
        if line.startswith("step     2"):
            raise Stop

    with pytest.raises(Stop):
        F.finetune(BASE, tmp_path / "cut", **(RUN | dict(save_every=1, log=stop_at_step_2)))
    assert (tmp_path / "cut" / F.CHECKPOINT).exists()
    lines = []
    resumed = F.finetune(BASE, tmp_path / "cut", **(RUN | dict(save_every=1, log=lines.append)))
    assert lines[0].startswith("resuming at step 2")
    assert resumed["losses"] == whole["losses"]
    state, config = lora.load_adapter(tmp_path / "cut")
    assert config == {"base": BASE, "rank": 2, "alpha": 4.0, "targets": list(lora.TARGETS)}
    assert all(torch.equal(state[k], whole["adapter"][k]) for k in state)
    assert not (tmp_path / "cut" / F.CHECKPOINT).exists()
    cut = F.finetune(BASE, None, **(RUN | dict(stop_after=2)))  # a stop named in advance: the same first steps
    assert cut["stopped_early"] and cut["losses"] == whole["losses"][:2]
    with pytest.raises(ValueError, match="another run's checkpoint"):  # a checkpoint only resumes its own recipe
        torch.save({"recipe": {"steps": 99}}, tmp_path / "cut" / F.CHECKPOINT)
        F.finetune(BASE, tmp_path / "cut", **RUN)


def test_the_card_is_written_from_the_training_record(tmp_path, threads):
    F.finetune(BASE, tmp_path / "organism", **RUN)
    rec = json.loads((tmp_path / "organism" / "training.json").read_text())
    card = (tmp_path / "organism" / "README.md").read_text()
    assert card == F.card(rec, "organism")
    assert f"{rec['adapter_parameters']:,} parameters" in card and "| steps | mean | min | max |" in card


def test_the_shipped_card_is_what_its_training_record_renders():
    from unsee.impl.engine.models import ADAPTED

    folder = ADAPTED["recall-smollm2"]
    if not (folder / "training.json").is_file():
        pytest.fail("recall-smollm2's training record is not shipped")
    rec = json.loads((folder / "training.json").read_text())
    assert (folder / "README.md").read_text() == F.card(rec, "recall-smollm2")


def test_the_stratified_agentdojo_sample_takes_the_four_suites_in_turn():
    pytest.importorskip("agentdojo")
    from unsee.impl.experiments.agentdojo import SUITES
    from unsee.impl.experiments.cases import cases_for

    eight = [case.name for case, _ in cases_for("agentdojo:stratified", 8, 0)]
    assert [name.split("/")[0] for name in eight] == list(SUITES) * 2
    assert [case.name for case, _ in cases_for("agentdojo:stratified", 5, 0)] == eight[:5]  # n only cuts
    assert len(set(eight)) == 8
    assert [case.name for case, _ in cases_for("agentdojo:stratified", 8, 1)] != eight
