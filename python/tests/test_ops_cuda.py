"""hydragen.ops on torch CUDA tensors (the H200): against torch's scaled_dot_product_attention
over each sequence's concatenated context, within bf16 tolerance, with no copies of the
inputs or the outputs. Skipped without a CUDA build and device."""
import os

import pytest

import hydragen
from hydragen import _hydragen
from hydragen.ops import Segment, Sequence, SharingTree

torch = pytest.importorskip("torch")
# The CUDA kernels take head_dim 64 or 128: the demo model (d 64, 256 positions), not the tiny preset (d 32).
DEMO = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "models", "demo")
pytestmark = pytest.mark.skipif(not (_hydragen.cuda_built and torch.cuda.is_available()),
                                reason="needs a CUDA build of hydragen and a CUDA device")


def sdpa(q, k, v, causal):
    """q [T, Hq, d] over k, v [S, Hkv, d] (GQA), the T queries the last T positions; fp32 math."""
    t, hq, d = q.shape
    g = hq // k.shape[1]
    kk, vv = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = k.shape[0]
    mask = None
    if causal and t > 1:
        mask = torch.arange(s, device=q.device)[None, :] <= (s - t + torch.arange(t, device=q.device))[:, None]
    o = torch.nn.functional.scaled_dot_product_attention(
        q.float().transpose(0, 1), kk.float().transpose(0, 1), vv.float().transpose(0, 1), attn_mask=mask)
    return o.transpose(0, 1)


@pytest.mark.parametrize("mode", ["hydragen", "paged"])
@pytest.mark.parametrize("t", [1, 4])
def test_hydragen_attention_on_cuda_matches_sdpa_without_copies(mode, t):
    torch.manual_seed(0)
    b, hq, hkv, d, p, s_max = 16, 32, 8, 128, 2048, 64
    dev, bf = "cuda", torch.bfloat16
    q = torch.randn(b, t, hq, d, device=dev, dtype=bf) if t > 1 else torch.randn(b, hq, d, device=dev, dtype=bf)
    pk, pv = (torch.randn(p, hkv, d, device=dev, dtype=bf) for _ in range(2))
    sk, sv = (torch.randn(b, s_max, hkv, d, device=dev, dtype=bf) for _ in range(2))
    lens = [int(x) for x in torch.randint(t, s_max + 1, (b,))]
    o, lse = hydragen.ops.hydragen_attention(q, pk, pv, sk, sv, lens, mode=mode)
    torch.cuda.synchronize()
    assert o.is_cuda and lse.is_cuda and o.dtype == bf and lse.dtype == torch.float32
    seen = _hydragen._last_pointers()
    for name, x in (("q", q), ("prefix_k", pk), ("prefix_v", pv), ("suffix_k", sk), ("suffix_v", sv)):
        assert seen[name] == x.data_ptr(), name
    assert seen["o"] == o.data_ptr() and seen["lse"] == lse.data_ptr()
    q4 = q if t > 1 else q[:, None]
    o4 = o if t > 1 else o[:, None]
    for i in range(b):
        k = torch.cat([pk, sk[i, :lens[i]]])
        v = torch.cat([pv, sv[i, :lens[i]]])
        ref = sdpa(q4[i], k, v, causal=True)
        torch.testing.assert_close(o4[i].float(), ref, atol=2e-2, rtol=2e-2)


def test_tree_attention_on_cuda_matches_sdpa():
    torch.manual_seed(1)
    hq, hkv, d, dev, bf = 16, 4, 128, "cuda", torch.bfloat16
    rnd = lambda n: torch.randn(n, hkv, d, device=dev, dtype=bf)  # noqa: E731
    segs = [Segment(rnd(1000), rnd(1000)), Segment(rnd(300), rnd(300), parent=0)]
    seqs = [Sequence(rnd(20), rnd(20), parent=1), Sequence(rnd(7), rnd(7), parent=0, query_tokens=3),
            Sequence(rnd(33), rnd(33), parent=1, query_tokens=2)]
    q = torch.randn(6, hq, d, device=dev, dtype=bf)
    o, lse = hydragen.ops.tree_attention(SharingTree(segs, seqs), q)
    torch.cuda.synchronize()
    row = 0
    for s, path in zip(seqs, [[0, 1], [0], [0, 1]]):
        k = torch.cat([segs[i].k for i in path] + [s.k])
        v = torch.cat([segs[i].v for i in path] + [s.v])
        ref = sdpa(q[row:row + s.query_tokens], k, v, causal=True)
        torch.testing.assert_close(o[row:row + s.query_tokens].float(), ref, atol=2e-2, rtol=2e-2)
        row += s.query_tokens


def test_generate_on_cuda_equals_itself_and_scores():
    llm = hydragen.LLM(model=DEMO, device="cuda", kv_memory="256MiB")
    p = hydragen.SamplingParams(n=4, temperature=0.8, seed=3, max_tokens=32, ignore_eos=True)
    prompt = list(range(5, 150))
    a = llm.generate([prompt] * 2, p, use_tqdm=False)
    b = llm.generate([prompt] * 2, p, use_tqdm=False)
    assert [[o.token_ids for o in r.outputs] for r in a] == [[o.token_ids for o in r.outputs] for r in b]
    scores = llm.score(prompt, [list(range(7, 40)), list(range(9, 20))])
    assert all(s.logprob < 0 for s in scores)
    cpu = hydragen.LLM(model=DEMO, device="cpu", kv_memory="64MiB")
    for a, b in zip(scores, cpu.score(prompt, [list(range(7, 40)), list(range(9, 20))])):
        assert a.token_ids == b.token_ids  # bf16 on the device against fp32 on the CPU:
        assert max(abs(x - y) for x, y in zip(a.token_logprobs, b.token_logprobs)) < 0.5


def test_load_weights_on_cuda_rebuilds_the_runner_and_flushes_the_cache():
    make = lambda: hydragen.LLM(model=DEMO, device="cuda", kv_memory="256MiB")  # noqa: E731
    greedy = hydragen.SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    prompt = list(range(5, 150))
    llm = make()
    old = llm.generate([prompt], greedy, use_tqdm=False)[0].outputs[0].token_ids
    weights = llm.state_dict()
    assert weights["model.norm.weight"].dtype == torch.bfloat16  # the runner's host copy of its weights
    new = {k: (v.float() + 0.05 * torch.randn_like(v.float())).to(torch.bfloat16)
           for k, v in weights.items() if "layers.0." in k}
    llm.load_weights(new)
    after = llm.generate([prompt], greedy, use_tqdm=False)[0].outputs[0].token_ids
    fresh = make()
    fresh.load_weights(new)
    assert after == fresh.generate([prompt], greedy, use_tqdm=False)[0].outputs[0].token_ids
    assert after != old
