"""A reply is the fixed point of its own prefill, so a recorded reply the target did not change
is accepted by one check instead of decoded again, exactly, with no oracle."""

import json
from dataclasses import replace

import pytest
import torch

from tests.kv_helpers import EPISODE, FAMILIES, prompts
from tests.store.test_cli_store import unsee
from tests.engine.test_kv_pages import kv_equal, snapshot_kv
from unsee.impl.engine.kv_runtime import KVRuntime
from unsee.impl.engine.kv import KVEngine
from unsee.impl.engine.selftest import row_independence
from unsee.impl.engine.lm import TorchLM
from unsee.impl.store.episode import write_episode
from unsee.impl.engine.exact import compare
from unsee.impl.experiments.oracle import oracle_replay
from unsee.impl.engine.models import Bundle, load
from unsee.model import Config
from unsee.model.replay import append
from unsee.impl.engine.metered import EngineTransition, Meter
from unsee.model.state import forward_groups

CONFIGS = [(m, d, a) for m in FAMILIES for d in ("float32", "bfloat16") for a in ("eager", "sdpa")]


def runtime(model, dtype, attn):
    return KVRuntime(model, Config(), "every", dtype=dtype, attn=attn)


@pytest.mark.tiny
@pytest.mark.parametrize("model,dtype,attn", CONFIGS)
def test_rows_are_independent_of_later_tokens(model, dtype, attn):
    rt = runtime(model, dtype, attn)
    holds, note = row_independence(rt.engine)
    assert holds, note
    assert rt.model.drafts_ok


@pytest.mark.tiny
@pytest.mark.parametrize("model,dtype,attn", CONFIGS)
def test_every_reply_is_the_fixed_point_of_its_prefill(model, dtype, attn):
    rt = runtime(model, dtype, attn)
    for o in EPISODE[:2]:  # a system prompt, then a user turn with a 4-token reply
        rt.step(o)
    r = rt.session.state
    reply, (first, last) = r.blocks[-1], forward_groups(r.blocks)[-1]
    assert last == len(r.blocks) - 1 and first < last  # the user block is joined to the turn
    start = r.blocks[first].start
    head, toks = r.tokens[start:reply.start + reply.prefill], r.tokens[reply.start + reply.prefill:reply.end]
    e = rt.engine.clone()
    b = len(rt.model.bos)
    e.crop(b + start)
    rows = e.prefill_logits(head + toks)  # [h + n, V]: the model turn, its user block included, is one prefill
    h = len(head)
    assert [e.choose(rows[h - 1 + i]) for i in range(len(toks))] == list(toks)
    assert kv_equal(e.kv_tensors(), rt.engine.kv_tensors())  # the turn's K/V are that prefill's


@pytest.mark.tiny
@pytest.mark.parametrize("model", FAMILIES)
def test_a_recorded_reply_is_accepted_with_no_decoding_and_the_same_bits(model):
    rt = KVRuntime(model)
    for o in EPISODE[:4]:
        rt.step(o)
    prev = rt.session
    before = snapshot_kv(rt)
    rt.step(EPISODE[4])  # a reply and a lookup plan
    want, recorded = snapshot_kv(rt), rt.session.state.outputs
    for hints, skipped in ((recorded, 2), (None, 0), (((recorded[0][:-1] + (recorded[0][-1] + 1,)),) + recorded[1:], 1)):
        again = rt.branch()
        again.session = prev
        kv, _ = again.model.rebuild(prev.state.tokens, prev.state.blocks)
        assert kv_equal(again.engine.kv_tensors(), before)
        again.session = replace(prev, states=prev.states[:-1] + (replace(prev.state, kv=kv),))
        again.lm.meter, f0 = Meter(), again.engine.forwards
        s2, _ = append(again.session, EPISODE[4], EngineTransition(again.lm, drafts=hints))
        m = again.lm.meter
        assert s2.state.outputs == recorded and kv_equal(again.engine.kv_tensors(), want)
        assert (m.replies, m.replies_skipped) == (2, skipped)
        groups = forward_groups(s2.state.blocks)[len(forward_groups(prev.state.blocks)):]
        if skipped == 2:  # every draft accepted: one forward per model turn (its prompt blocks, header and
            # reply) and one per prompt block no turn follows: 3 forwards for 5 blocks
            assert again.engine.forwards - f0 == len(groups) == 3 < len(s2.state.blocks) - len(prev.state.blocks)
        n = [len(x) for x in recorded]
        h = prompts(s2.state, prev.T)  # the two turns' prompts: the blocks joined to each and its header
        # decoding forwards the header alone and picks a draft's last token with no forward; the
        # turn's prefill checks it; the draft wrong at its last token is checked twice (the second
        # time with its header), and re-drafted with no forward at all
        assert m.tokens_decoded == (sum(h) + sum(k - 1 for k in n) if hints is None else 0)
        assert m.tokens_verified == sum(n) + (n[0] + h[0] if skipped == 1 else 0)


@pytest.mark.tiny
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("model", FAMILIES)
def test_b7_with_drafts_is_bit_exact_against_a_full_reset(model, dtype):
    rt = KVRuntime(model, dtype=dtype)
    for o in EPISODE:
        rt.step(o)
    b7, b5 = rt.branch(), rt.branch()
    r7, r5 = b7.forget(["z"]), b5.forget(["z"], method="B5")
    eq = compare(b7, b5)
    assert all(eq.values()), eq
    assert r7.work.replies == 7 and r5.work.replies_skipped == 0  # B5 is a restart: it has no drafts
    assert r7.work.tokens_decoded <= r5.work.tokens_decoded


@pytest.mark.tiny
def test_trusting_the_drafts_unchecked_is_caught():
    """B7-oracle with every post-τ turn marked: what skipping would be without the check."""
    rt = KVRuntime("tiny-qwen2")
    for o in EPISODE:
        rt.step(o)
    b7, bad, b5 = rt.branch(), rt.branch(), rt.branch()
    r7 = b7.forget(["z"])
    oracle_replay(bad, ["z"], frozenset(range(3, 8)))
    b5.forget(["z"], method="B5")
    assert r7.work.replies_skipped < r7.work.replies  # the target changed some replies here…
    assert all(compare(b7, b5).values())
    assert not all(compare(bad, b5).values())  # …and trusting the recording keeps the old ones


class Leaky(torch.nn.Module):
    """A backend that breaks row independence: every logits row sees the block's mean."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config = inner, inner.config

    def forward(self, **kw):
        out = self.inner(**kw)
        out.logits = out.logits + out.logits.mean(dim=1, keepdim=True)
        return out


@pytest.mark.tiny
def test_a_backend_that_breaks_row_independence_refuses_skipping_and_stays_exact():
    good = load("tiny-llama")
    bundle = Bundle("leaky", Leaky(good.model).eval(), good.template, good.device, good.dtype)
    holds, note = row_independence(KVEngine(bundle.model, bundle.device))
    assert not holds and "skipping refused" in note
    rt = KVRuntime(TorchLM(bundle), Config(), "every")
    assert not rt.model.drafts_ok
    for o in EPISODE:
        rt.step(o)
    b7, b5 = rt.branch(), rt.branch()
    r7 = b7.forget(["z"])
    b5.forget(["z"], method="B5")
    assert r7.work.replies_skipped == 0 and all(compare(b7, b5).values())


@pytest.mark.tiny
def test_a_forget_in_a_new_process_reuses_the_stored_replies(tmp_path):
    ep = tmp_path / "e.jsonl"
    write_episode(ep, EPISODE)
    db = tmp_path / "s.db"
    unsee("run", ep, "--db", db, "--model", "tiny-mistral")
    receipt = tmp_path / "r.json"
    unsee("forget", "--db", db, "--source", "z", "--json", receipt)
    r = json.loads(receipt.read_text())
    assert r["replies"] == 7 and r["replies_skipped"] > 0  # stored outputs, read back as drafts
    unsee("check", "--db", db)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fixed_point_and_skipping_on_cuda(dtype):
    bundle = load("tiny-llama", dtype=dtype, device="cuda", attn="sdpa")
    holds, note = row_independence(KVEngine(bundle.model, bundle.device))
    rt = KVRuntime("tiny-llama", dtype=dtype, device="cuda")
    for o in EPISODE:
        rt.step(o)
    b7, b5 = rt.branch(), rt.branch()
    r7 = b7.forget(["z"])
    b5.forget(["z"], method="B5")
    assert all(compare(b7, b5).values())
    assert (r7.work.replies_skipped > 0) <= holds, note
