"""Audit throughput without changing a result: batched decoding of one method's probes and
Leak@5 samples, episodes in worker processes and on a (local) Ray cluster."""

import json

import pytest
import torch

from unsee.impl.engine import batched as B
from unsee.impl.engine import kv as K
from unsee.impl.engine.exact import ExactnessError
from unsee.impl.engine.kv_runtime import KVRuntime
from unsee.impl.experiments.audit import (LEAK_TEMPERATURE, audit_episode, continue_task, own_memo, probe_prompts,
                                          run_audit, sample_draws)
from unsee.impl.experiments.baselines import apply
from unsee.impl.experiments.cases import memory_case
from unsee.model import Config
from unsee.model.tools import SHIP_GIFT

pytestmark = pytest.mark.tiny

N = 6


@pytest.fixture(scope="module")
def contaminated():
    case = memory_case(2, kind="address", reply=6)
    live = KVRuntime("tiny-llama", Config(summary_tokens=6, tools=(SHIP_GIFT,)))
    for o in case.observations:
        live.step(o)
    return live, case


def _rows(rt, case):
    lm = rt.model
    ps = [lm.encode("user", p) + lm.header("reply") for p in probe_prompts(case)]
    return ps + [ps[1]] * 4, [None] * len(ps) + [sample_draws(3, i, N) for i in range(4)]


def _decode_rows_logging(engine, prompts, draws, monkeypatch, max_bytes=1 << 30):
    """decode_rows, with every row of logits it chooses from (step-major, then row)."""
    seen = []
    choose = K.KVEngine.choose
    monkeypatch.setattr(K.KVEngine, "choose", staticmethod(
        lambda logits, draw=None, temperature=1.0: (seen.append(logits.clone()), choose(logits, draw, temperature))[1]))
    toks, first = B.decode_rows(engine, prompts, N, draws, LEAK_TEMPERATURE, max_bytes=max_bytes)
    monkeypatch.setattr(K.KVEngine, "choose", staticmethod(choose))
    return toks, first, seen


@pytest.mark.parametrize("max_bytes", [1 << 30, 1], ids=["one-batch", "row-by-row"])
def test_b7_and_b5_rows_are_bit_identical_in_one_batch_shape(contaminated, monkeypatch, max_bytes):
    """As the audit batches them: the same prompts and matched draws, and in the last rows each
    method's own independent draws. The rows B7 shares with B5 are bit-identical (every step's
    logits), whatever the rows next to them decode."""
    live, case = contaminated
    out = {}
    for m in ("B5", "B7", "B0"):
        rt, _ = apply(m, live, case.sources, case.texts)
        prompts, draws = _rows(rt, case)
        draws[-2:] = [sample_draws(3, i, N, salt=sum(map(ord, m))) for i in range(2)]  # this method's own
        out[m] = _decode_rows_logging(rt.model.engine, prompts, draws, monkeypatch, max_bytes)
    (t5, f5, s5), (t7, f7, s7), (t0, _, s0) = out["B5"], out["B7"], out["B0"]
    b, shared = 10, 8  # rows, and the rows before each method's own draws
    assert t5[:shared] == t7[:shared] and len(t5) == b and all(len(r) == N for r in t5)
    assert f5.keys() == f7.keys() and all(torch.equal(f5[p], f7[p]) for p in f5)
    assert len(s5) == len(s7) == b * N
    at = (lambda r, j: j * b + r) if max_bytes > 1 else (lambda r, j: r * N + j)  # noqa: E731 (step- or row-major)
    assert all(torch.equal(s5[at(r, j)], s7[at(r, j)]) for j in range(N) for r in range(shared))
    assert t5[shared:] != t7[shared:]  # the own draws did decode something else next to them
    assert not all(torch.equal(a, b) for a, b in zip(s5, s0))  # B0 still holds the target: another cache


def test_batched_decode_matches_one_at_a_time(contaminated, monkeypatch):
    """Prompt logits are probe()'s bit for bit; each decode step's logits equal, to float32
    rounding, those of feeding the same tokens one row at a time (a batch of B rows is another
    matmul shape, so bits may differ there); the tokens are decode()'s."""
    live, case = contaminated
    eng = live.model.engine
    prompts, draws = _rows(live, case)
    toks, first, seen = _decode_rows_logging(eng, prompts, draws, monkeypatch)
    for p in first:
        assert torch.equal(first[p], eng.probe(p))
    b = len(prompts)
    for r, (p, d) in enumerate(zip(prompts, draws)):
        e = eng.clone()
        e.prefill(p)
        for j in range(N):
            assert torch.allclose(seen[j * b + r], e.logits, rtol=0, atol=1e-4), (r, j)
            e._forward([toks[r][j]])
        e.release()
        e = eng.clone()
        e.prefill(p)
        assert e.decode(N, d, LEAK_TEMPERATURE) == toks[r]
        e.release()
    assert len(B.decode_rows(eng, prompts, 0)[0]) == b


@pytest.mark.parametrize("heads,kv_heads,q", [(6, 3, 1), (4, 4, 1), (8, 2, 3)])
def test_shared_prefix_attention_is_attention_over_the_whole_row(heads, kv_heads, q):
    """Against SDPA over each row's own copy of the context followed by its own positions, with
    the padding masked: the same attention up to float32 rounding, for grouped and plain heads."""
    g = torch.Generator().manual_seed(heads * 10 + q)
    b, c, s, d = 5, 37, 9, 16
    query = torch.randn(b, heads, q, d, generator=g)
    kp, vp = torch.randn(1, kv_heads, c, d, generator=g), torch.randn(1, kv_heads, c, d, generator=g)
    key, value = torch.randn(b, kv_heads, s, d, generator=g), torch.randn(b, kv_heads, s, d, generator=g)
    mask = torch.rand(b, 1, q, s, generator=g) > 0.3
    mask[..., -1] = True  # every row attends to its last position (its newest token)

    class Layer(torch.nn.Module):
        layer_idx = 0
    token = B._SHARED_PREFIX.set({0: (kp, vp)})
    try:
        out, _ = B.shared_prefix_attention(Layer(), query, key, value, mask, scaling=d ** -0.5)
    finally:
        B._SHARED_PREFIX.reset(token)
    full_k = torch.cat([kp.expand(b, -1, -1, -1), key], 2).repeat_interleave(heads // kv_heads, 1)
    full_v = torch.cat([vp.expand(b, -1, -1, -1), value], 2).repeat_interleave(heads // kv_heads, 1)
    full_mask = torch.cat([torch.ones(b, 1, q, c, dtype=torch.bool), mask], -1)
    want = torch.nn.functional.scaled_dot_product_attention(query, full_k, full_v, attn_mask=full_mask)
    assert out.shape == (b, q, heads, d)
    assert torch.allclose(out, want.transpose(1, 2), rtol=0, atol=1e-5)
    assert not torch.allclose(out, torch.nn.functional.scaled_dot_product_attention(  # the mask matters
        query, full_k, full_v).transpose(1, 2), rtol=0, atol=1e-3)


def test_the_batched_decode_restores_the_attention_kernel(contaminated):
    live, case = contaminated
    eng = live.model.engine
    before = eng.model.config._attn_implementation
    prompts, draws = _rows(live, case)
    B.decode_rows(eng, prompts, N, draws, LEAK_TEMPERATURE)
    assert eng.model.config._attn_implementation == before
    assert B._SHARED_PREFIX.get(None) is None


@pytest.mark.parametrize("extra", [{"layer_types": ["full_attention", "sliding_attention"]},
                                   {"use_sliding_window": True, "sliding_window": 64},
                                   {"attn_logit_softcapping": 50.0}], ids=["layer-types", "window", "softcap"])
def test_the_batched_decode_refuses_attention_it_does_not_compute(extra):
    from types import SimpleNamespace

    B.check_shared_prefix(SimpleNamespace(config=SimpleNamespace(model_type="llama")))
    with pytest.raises(ExactnessError, match="full attention only"):
        B.check_shared_prefix(SimpleNamespace(config=SimpleNamespace(model_type="x", **extra)))


class _Concatenating:
    """The batch cache's update as it was before in-place writes: grow by concatenation."""

    def __init__(self, layer, keys, values):
        self.layer = layer

    def __call__(self, key_states, value_states, *args, **kwargs):
        layer = self.layer
        layer.keys = torch.cat([layer.keys, key_states], dim=-2)
        layer.values = torch.cat([layer.values, value_states], dim=-2)
        return layer.keys, layer.values


def test_in_place_rows_are_the_bits_concatenation_gives(contaminated, monkeypatch):
    live, case = contaminated
    prompts, draws = _rows(live, case)
    in_place = _decode_rows_logging(live.model.engine, prompts, draws, monkeypatch)
    monkeypatch.setattr(B, "_InPlace", _Concatenating)
    grown = _decode_rows_logging(live.model.engine, prompts, draws, monkeypatch)
    assert in_place[0] == grown[0] and len(in_place[2]) == len(grown[2]) == len(prompts) * N
    assert all(torch.equal(a, b) for a, b in zip(in_place[2], grown[2]))


def test_a_failing_batched_decode_leaves_no_rows_and_no_patched_layer(contaminated, monkeypatch):
    """An error mid-batch (out of memory, an interrupt) still zeroes the batch's buffers, which
    may hold the target's rows, and takes the in-place update off every layer."""
    live, case = contaminated
    prompts, draws = _rows(live, case)
    eng, made = live.model.engine, []
    real = B._InPlace

    def spy(layer, keys, values):
        made.append((layer, keys, values))
        return real(layer, keys, values)
    monkeypatch.setattr(B, "_InPlace", spy)
    calls = {"n": 0}
    forward = type(eng.model).forward

    def failing(self, *args, **kwargs):
        calls["n"] += 1
        if kwargs.get("attention_mask") is not None and calls["n"] > 2:  # a decode step, not a prompt's prefill
            raise MemoryError("simulated")
        return forward(self, *args, **kwargs)
    monkeypatch.setattr(type(eng.model), "forward", failing)
    with pytest.raises(MemoryError):
        B.decode_rows(eng, prompts, N, draws, LEAK_TEMPERATURE)
    assert made
    for layer, keys, values in made:
        assert "update" not in layer.__dict__
        assert not keys.any() and not values.any()


def test_batched_and_serial_audits_agree(contaminated):
    live, case = contaminated
    methods = ["B0", "B3", "B7", "B8", "B9"]
    assert audit_episode(live, case, methods, n_tokens=N, seed=1, batch=True) == \
        audit_episode(live, case, methods, n_tokens=N, seed=1, batch=False)


def test_b5_replies_as_drafts_change_no_row_and_save_decoding(contaminated, monkeypatch):
    """Every method's continuation gets B5's replies as drafts. Each reply is still the method's
    own fixed point, so every row is the same as without them; B7's replies are B5's, so its
    continuation is checked instead of decoded."""
    live, case = contaminated
    decoded = []
    real = K.KVEngine.decode

    def counting(self, n, draws=None, temperature=1.0, feed_last=True):
        decoded.append(n)
        return real(self, n, draws, temperature, feed_last)
    monkeypatch.setattr(K.KVEngine, "decode", counting)
    methods = ["B0", "B3", "B7", "B8", "B9"]
    counts = {}
    for hints in (False, True):
        decoded.clear()
        rows = audit_episode(live, case, methods, n_tokens=N, seed=1, hints=hints)
        counts[hints] = sum(decoded)
        if not hints:
            plain = rows
    assert rows == plain
    b5, b7 = (apply(m, live, case.sources, case.texts)[0] for m in ("B5", "B7"))
    drafts5, drafts7 = [], []
    decoded.clear()
    cont5 = continue_task(b5, N, case.sources, drafts=drafts5)
    decoded5, decoded[:] = sum(decoded), []
    cont7 = continue_task(b7, N, case.sources, hints=drafts5, drafts=drafts7)
    assert cont7 == cont5 and drafts7 == drafts5 and len(drafts5) == 2
    assert decoded5 > 0 and sum(decoded) == 0  # B7's replies are B5's: all checked, none decoded
    assert counts[True] < counts[False]


def test_an_episode_detokenizes_with_its_own_memo():
    from unsee.impl.engine.models import load

    tmpl = load("tiny-llama").template
    tmpl.encode_raw("somewordthisprocesssaw")
    before = dict(tmpl.words)
    with own_memo(tmpl):
        assert tmpl.words == {}
        tmpl.encode_raw("anotherword")
    assert tmpl.words == before


METHODS = ("B0", "B2", "B7")


def _strip(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k != "run"}


@pytest.fixture(scope="module")
def serial():
    return run_audit("tiny-llama", "memory", 2, METHODS, seed=4, n_tokens=4)


def test_workers_give_the_serial_result(serial):
    par = run_audit("tiny-llama", "memory", 2, METHODS, seed=4, n_tokens=4, workers=2)
    assert par["run"]["workers"] == 2 and serial["run"]["workers"] == 1
    assert _strip(par) == _strip(serial)
    assert [c["name"] for c in par["cases"]] == ["memory-iban-4", "memory-preference-5"]


def test_a_local_two_worker_ray_cluster_gives_the_serial_result(serial):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert ray.cluster_resources()["CPU"] == 2
        doc = run_audit("tiny-llama", "memory", 2, METHODS, seed=4, n_tokens=4, ray="local")
    finally:
        ray.shutdown()
    assert doc["run"]["ray"] == "local"
    assert _strip(doc) == _strip(serial)


def test_the_sdpa_kernel_keeps_b7_identical_to_b5_and_is_recorded(serial):
    """--attn sdpa (the faster kernel on long contexts) is another computation, so its figures
    may differ from eager's; what may not differ is B7 against B5, cell for cell."""
    doc = run_audit("tiny-llama", "memory", 2, METHODS, seed=4, n_tokens=4, attn="sdpa")
    assert doc["run"]["attn"] == "sdpa" and serial["run"]["attn"] == "eager"
    assert doc["tests"]["B7"]["identical_to_B5"] is True
    assert [c["name"] for c in doc["cases"]] == [c["name"] for c in serial["cases"]]
    with pytest.raises(ValueError, match="--attn"):
        run_audit("tiny-llama", "memory", 1, METHODS, attn="flash")


def test_a_journal_keeps_finished_episodes_and_a_rerun_reuses_them(serial, tmp_path, monkeypatch):
    """An audit stopped after its first episode keeps that episode on disk; the same audit run
    again with the journal runs only the second and gives the serial run's result."""
    import unsee.impl.experiments.audit as A
    import unsee.impl.experiments.journal as J

    path = tmp_path / "audit.jsonl"
    real, calls = A._episode_job, []

    def first_then_stop(job):
        if calls:
            raise KeyboardInterrupt
        calls.append(job)
        return real(job)

    monkeypatch.setattr(A, "_episode_job", first_then_stop)
    with pytest.raises(KeyboardInterrupt):
        run_audit("tiny-llama", "memory", 2, METHODS, seed=4, n_tokens=4, journal=path)
    assert len(path.read_text().splitlines()) == 2  # the header and episode 0
    with path.open("a") as f:
        f.write('{"i": 1, "case": "memory-pref')  # a line torn by a crash: dropped, that episode runs again
    ran = []
    monkeypatch.setattr(A, "_episode_job", lambda job: ran.append(job[5]) or real(job))
    doc = run_audit("tiny-llama", "memory", 2, METHODS, seed=4, n_tokens=4, journal=path)
    assert ran == [5]  # episode 1 (seed 4 + 1) alone
    assert doc["run"]["episodes_run"] == 1 and doc["run"]["episodes_from_journal"] == 1
    assert _strip(doc) == _strip(serial)
    again = run_audit("tiny-llama", "memory", 2, METHODS, seed=4, n_tokens=4, journal=path)
    assert ran == [5] and again["run"]["episodes_run"] == 0 and _strip(again) == _strip(serial)
    with pytest.raises(J.JournalError, match="seed: 4 there, 5 here"):
        run_audit("tiny-llama", "memory", 2, METHODS, seed=5, n_tokens=4, journal=path)
    older = tmp_path / "older.jsonl"  # the same audit's journal, from before journals named the schedule
    head, *episodes = path.read_text().splitlines()
    older.write_text("\n".join([json.dumps({k: v for k, v in json.loads(head).items() if k != "schedule"}),
                                *episodes]) + "\n")
    with pytest.raises(J.JournalError, match="another schedule of F \\(unrecorded.*new --journal path"):
        run_audit("tiny-llama", "memory", 2, METHODS, seed=4, n_tokens=4, journal=older)
    one = run_audit("tiny-llama", "memory", 1, METHODS, seed=4, n_tokens=4, journal=path)
    assert ran == [5] and one["run"]["episodes_from_journal"] == 1  # fewer episodes: the journal's first
    assert one["per_episode"]["B7"] == serial["per_episode"]["B7"][:1]
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], lines[1].replace("memory-iban-4", "memory-iban-9"), *lines[2:]]) + "\n")
    with pytest.raises(J.JournalError, match="its episode 0 is 'memory-iban-9'"):
        run_audit("tiny-llama", "memory", 2, METHODS, seed=4, n_tokens=4, journal=path)
    header = json.loads(lines[0])
    held = J.Journal(path, header, ["memory-iban-9"])  # an audit running on it now
    try:
        with pytest.raises(J.JournalError, match="in use by another audit"):
            J.Journal(path, header, ["memory-iban-9"])
    finally:
        held.close()
    J.Journal(path, header, ["memory-iban-9"]).close()  # free again once that audit ends


def test_a_stopped_parallel_audit_leaves_no_worker_running(tmp_path, monkeypatch):
    """Ctrl-C or SIGTERM while episodes run in workers: the workers are stopped with the audit
    (before, a stopped parent left them decoding), and the journal keeps what finished."""
    import multiprocessing

    import unsee.impl.experiments.journal as J

    path = tmp_path / "audit.jsonl"

    def stop(count, name, reused):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_audit("tiny-llama", "memory", 4, METHODS, seed=4, n_tokens=4, workers=2, journal=path, on_episode=stop)
    assert multiprocessing.active_children() == []
    assert len(path.read_text().splitlines()) == 2  # the header and the episode that finished
    J.Journal(path, json.loads(path.read_text().splitlines()[0]), []).close()  # and the journal is free


def test_stopping_a_pool_kills_its_own_workers_and_no_other_child():
    """`stop_workers` kills every process the pool started, and leaves other children started
    after the pool running: a forked one, and a spawned one of the pool's own process class.
    Twenty pools in a row: the executor's own thread reaps its dead workers at the same moment,
    and a stop that only joined returned with a worker reading alive in about one stop in seven."""
    import multiprocessing
    import time
    from concurrent.futures import ProcessPoolExecutor

    from unsee.impl.experiments.pool import stop_workers

    before = {p.pid for p in multiprocessing.active_children()}
    others = [multiprocessing.get_context(m).Process(target=time.sleep, args=(120,)) for m in ("fork", "spawn")]
    try:
        for p in others:
            p.start()
        for _ in range(20):
            pool = ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn"))
            try:
                futures = [pool.submit(time.sleep, 60) for _ in range(2)]
                deadline = time.monotonic() + 60
                while len(pool._processes or {}) < 2 and time.monotonic() < deadline:
                    time.sleep(0.01)
                workers = list(pool._processes.values())
                assert len(workers) == len(futures) == 2
                stop_workers(pool, before)
                assert [w.pid for w in workers if w.is_alive()] == []
                assert all(p.is_alive() for p in others)
            finally:
                stop_workers(pool, before)
    finally:
        for p in others:
            p.kill()
            p.join(10)
