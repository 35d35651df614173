"""LLM.score: each continuation's token log-probabilities given the context, against the
float64 NumPy forward pass of the same weights, equal across attention modes."""
import numpy as np
import pytest

import hydragen

from reference import llama_logits, log_softmax

RNG = np.random.default_rng(11)


def reference_scores(weights, context, continuations):
    out = []
    for cont in continuations:
        tokens = list(context) + list(cont)
        lp = log_softmax(llama_logits(weights, tokens, layers=4, heads=8, kv_heads=2))
        out.append([lp[len(context) - 1 + j, t] for j, t in enumerate(cont)])
    return out


def test_score_matches_the_full_sequence_forward(tiny):
    context = RNG.integers(3, 4096, 41).tolist()
    continuations = [RNG.integers(3, 4096, n).tolist() for n in (6, 1, 13, 6)]
    got = tiny.score(context, continuations)
    ref = reference_scores(tiny.state_dict(), context, continuations)
    assert len(got) == len(continuations)
    for g, r, cont in zip(got, ref, continuations):
        assert g.token_ids == cont
        np.testing.assert_allclose(g.token_logprobs, r, atol=2e-5, rtol=0)
        assert g.logprob == pytest.approx(sum(g.token_logprobs))


def test_score_is_the_same_in_paged_and_dense_mode(tiny):
    context = RNG.integers(3, 4096, 70).tolist()
    continuations = [RNG.integers(3, 4096, n).tolist() for n in (5, 9)]
    shared = tiny.score(context, continuations)
    for mode in ("paged", "dense"):
        other = hydragen.LLM(random_weights="tiny", device="cpu", kv_memory="16MiB", page_size=16, attention=mode)
        for a, b in zip(shared, other.score(context, continuations)):
            np.testing.assert_allclose(a.token_logprobs, b.token_logprobs, atol=1e-5, rtol=0)


def test_score_prefills_the_context_once(tiny):
    context = RNG.integers(3, 4096, 200).tolist()
    before = tiny.metrics()
    tiny.score(context, [RNG.integers(3, 4096, 4).tolist() for _ in range(4)])
    after = tiny.metrics()
    prefilled = after["prefill_tokens"] - before["prefill_tokens"]
    assert prefilled < 200 + 4 * 2, prefilled  # once (and each sequence's own last context token), not 4 times


def test_score_edge_cases(tiny):
    assert tiny.score([5, 6, 7], [[]])[0].logprob == 0.0
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tiny.score([5, 6, 7], [[1, 99999]])
    with pytest.raises(ValueError, match="continuations\\[0\\]"):
        tiny.score([5, 6, 7], [["a"]])


def test_generate_top_logprobs_are_the_forward_pass_top_n(tiny):
    prompt = RNG.integers(3, 4096, 23).tolist()
    out = tiny.generate([prompt], hydragen.SamplingParams(temperature=0.9, seed=4, max_tokens=5, logprobs=4),
                        use_tqdm=False)[0].outputs[0]
    lp = log_softmax(llama_logits(tiny.state_dict(), prompt + out.token_ids, layers=4, heads=8, kv_heads=2))
    for j, (token, entry) in enumerate(zip(out.token_ids, out.logprobs)):
        row = lp[len(prompt) - 1 + j]
        top = np.argsort(-row)[:4]
        assert set(entry) == set(top.tolist()) | {token}
        for t, value in entry.items():
            assert value == pytest.approx(row[t], abs=2e-5)
