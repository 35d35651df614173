"""LLM.load_weights: weights replaced in place (names and shapes checked), and the prefix
cache flushed so no K/V of the old weights is reused."""
import numpy as np
import pytest

import hydragen
from hydragen import SamplingParams

PROMPT = [1, 17, 289, 45, 3, 500, 77, 128, 9, 31, 400, 12] * 6
GREEDY = SamplingParams(temperature=0, max_tokens=8)


def new_tiny():
    return hydragen.LLM(random_weights="tiny", device="cpu", kv_memory="16MiB", page_size=16)


def perturbed(weights):
    rng = np.random.default_rng(5)
    return {name: (w + 0.05 * rng.standard_normal(w.shape)).astype(np.float32)
            for name, w in weights.items() if "layers.0." in name or "layers.1." in name}


def test_state_dict_names_and_shapes():
    w = new_tiny().state_dict()
    assert w["model.embed_tokens.weight"].shape == (4096, 256)
    assert w["model.layers.3.self_attn.k_proj.weight"].shape == (64, 256)  # 2 kv heads of 32
    assert all(a.dtype == np.float32 for a in w.values())


def test_new_weights_change_outputs_and_flush_the_prefix_cache():
    llm = new_tiny()
    old = llm.generate([PROMPT], GREEDY, use_tqdm=False)[0].outputs[0].token_ids
    new_weights = perturbed(llm.state_dict())
    llm.load_weights(new_weights)
    hits_before = llm.metrics()["prefix_cache_hit_tokens"]
    after = llm.generate([PROMPT], GREEDY, use_tqdm=False)[0].outputs[0]
    assert llm.metrics()["prefix_cache_hit_tokens"] == hits_before, "the old weights' K/V was reused"
    fresh = new_tiny()
    fresh.load_weights(new_weights)
    expected = fresh.generate([PROMPT], GREEDY, use_tqdm=False)[0].outputs[0]
    assert after.token_ids == expected.token_ids
    assert after.cumulative_logprob == pytest.approx(expected.cumulative_logprob, abs=1e-5)
    assert after.token_ids != old
    for name, w in new_weights.items():
        np.testing.assert_array_equal(llm.state_dict()[name], w)
    # The cache works again after the flush: a repeat hits it.
    llm.generate([PROMPT], GREEDY, use_tqdm=False)
    assert llm.metrics()["prefix_cache_hit_tokens"] > hits_before


def test_torch_tensors_load_too():
    torch = pytest.importorskip("torch")
    llm = new_tiny()
    w = perturbed(llm.state_dict())
    llm.load_weights({k: torch.from_numpy(v).to(torch.float64) for k, v in w.items()})
    for name, v in w.items():
        np.testing.assert_allclose(llm.state_dict()[name], v, rtol=1e-7)


def test_strided_arrays_load_as_their_values():
    llm = new_tiny()
    name = "model.layers.0.mlp.down_proj.weight"
    w = np.asfortranarray(perturbed(llm.state_dict())[name])
    llm.load_weights({name: w})
    np.testing.assert_array_equal(llm.state_dict()[name], w)


def test_bad_weights_name_the_tensor_and_change_nothing():
    llm = new_tiny()
    before = llm.state_dict()
    name = "model.layers.0.self_attn.q_proj.weight"
    with pytest.raises(ValueError, match="model.layers.0.self_attn.q_proj.weight must be \\[256, 256\\]"):
        llm.load_weights({"model.norm.weight": np.zeros(256, np.float32), name: np.zeros((256, 255), np.float32)})
    with pytest.raises(ValueError, match="'model.layers.9.mlp.up_proj.weight' is not a weight of this model"):
        llm.load_weights({"model.layers.9.mlp.up_proj.weight": np.zeros((512, 256), np.float32)})
    with pytest.raises(ValueError, match="model.norm.weight"):
        llm.load_weights({"model.norm.weight": "zeros"})
    np.testing.assert_array_equal(llm.state_dict()["model.norm.weight"], before["model.norm.weight"])
