"""hydragen.ops on NumPy arrays and torch CPU tensors: exact against the float64 reference of
plain attention over each sequence's concatenated context, viewed without copies, and bad
shapes raising ValueError naming the argument."""
import numpy as np
import pytest

import hydragen
from hydragen import _hydragen
from hydragen.ops import Segment, Sequence, SharingTree

from reference import attention

RNG = np.random.default_rng(3)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def one_level(b=3, t=1, hq=8, hkv=2, d=64, p=45, s_max=7, lens=(7, 0, 3)):
    q = rand(b, t, hq, d) if t > 1 else rand(b, hq, d)
    return q, rand(p, hkv, d), rand(p, hkv, d), rand(b, s_max, hkv, d), rand(b, s_max, hkv, d), list(lens)


def one_level_reference(q, pk, pv, sk, sv, lens, causal=True):
    q4 = q if q.ndim == 4 else q[:, None]
    os_, lses = [], []
    for b in range(q4.shape[0]):
        k = np.concatenate([pk, sk[b, :lens[b]]])
        v = np.concatenate([pv, sv[b, :lens[b]]])
        o, lse = attention(q4[b], k, v, causal_rows=causal and q4.shape[1] > 1)
        os_.append(o), lses.append(lse)
    o, lse = np.stack(os_), np.stack(lses)
    return (o, lse) if q.ndim == 4 else (o[:, 0], lse[:, 0])


@pytest.mark.parametrize("mode", ["hydragen", "paged", "dense"])
def test_hydragen_attention_matches_the_float64_reference(mode):
    args = one_level()
    o, lse = hydragen.ops.hydragen_attention(*args, mode=mode)
    ref_o, ref_lse = one_level_reference(*args)
    assert isinstance(o, np.ndarray) and o.shape == ref_o.shape and lse.shape == ref_lse.shape
    np.testing.assert_allclose(o, ref_o, atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(lse, ref_lse, atol=2e-5, rtol=1e-5)


def test_hydragen_attention_with_several_query_tokens_is_causal_in_the_suffix():
    args = one_level(t=3, lens=(5, 3, 7))
    o, lse = hydragen.ops.hydragen_attention(*args)
    ref_o, ref_lse = one_level_reference(*args)
    assert o.shape == (3, 3, 8, 64) and lse.shape == (3, 3, 8)
    np.testing.assert_allclose(o, ref_o, atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(lse, ref_lse, atol=2e-5, rtol=1e-5)


def test_tree_attention_over_two_levels_matches_the_reference():
    hq, hkv, d = 4, 2, 64
    root, child = Segment(rand(40, hkv, d), rand(40, hkv, d)), Segment(rand(17, hkv, d), rand(17, hkv, d), parent=0)
    seqs = [Sequence(rand(5, hkv, d), rand(5, hkv, d), parent=1, query_tokens=2),
            Sequence(rand(0, hkv, d), rand(0, hkv, d), parent=0, query_tokens=1),
            Sequence(rand(9, hkv, d), rand(9, hkv, d), parent=None, query_tokens=3)]
    tree = SharingTree([root, child], seqs)
    q = rand(6, hq, d)
    o, lse = hydragen.ops.tree_attention(tree, q, scale=0.3)
    paths = [[root, child], [root], []]
    row = 0
    for s, path in zip(seqs, paths):
        k = np.concatenate([x.k for x in path] + [s.k])
        v = np.concatenate([x.v for x in path] + [s.v])
        ref_o, ref_lse = attention(q[row:row + s.query_tokens], k, v, causal_rows=s.query_tokens > 1, scale=0.3)
        np.testing.assert_allclose(o[row:row + s.query_tokens], ref_o, atol=2e-5, rtol=1e-4)
        np.testing.assert_allclose(lse[row:row + s.query_tokens], ref_lse, atol=2e-5, rtol=1e-5)
        row += s.query_tokens


def test_numpy_inputs_and_outputs_are_not_copied():
    args = one_level()
    o, lse = hydragen.ops.hydragen_attention(*args)
    seen = _hydragen._last_pointers()
    for name, array in zip(["q", "prefix_k", "prefix_v", "suffix_k", "suffix_v"], args):
        assert seen[name] == array.ctypes.data, name
    assert seen["o"] == o.ctypes.data and seen["lse"] == lse.ctypes.data


def test_torch_cpu_tensors_through_dlpack_without_copies():
    torch = pytest.importorskip("torch")
    args = one_level()
    targs = [torch.from_numpy(a) for a in args[:5]] + [args[5]]
    o, lse = hydragen.ops.hydragen_attention(*targs)
    assert isinstance(o, torch.Tensor) and o.dtype == torch.float32
    seen = _hydragen._last_pointers()
    for name, t in zip(["q", "prefix_k", "prefix_v", "suffix_k", "suffix_v"], targs):
        assert seen[name] == t.data_ptr(), name
    assert seen["o"] == o.data_ptr() and seen["lse"] == lse.data_ptr()
    ref_o, ref_lse = one_level_reference(*args)
    np.testing.assert_allclose(o.numpy(), ref_o, atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(lse.numpy(), ref_lse, atol=2e-5, rtol=1e-5)


def test_bf16_torch_tensors_are_computed_in_f32():
    torch = pytest.importorskip("torch")
    args = one_level()
    targs = [torch.from_numpy(a).to(torch.bfloat16) for a in args[:5]] + [args[5]]
    o, _ = hydragen.ops.hydragen_attention(*targs)
    ref_o, _ = one_level_reference(*[t.float().numpy() for t in targs[:5]], args[5])
    np.testing.assert_allclose(o.float().numpy(), ref_o, atol=2e-4, rtol=1e-3)


@pytest.mark.parametrize("bad, index, name", [
    (lambda: rand(3, 8, 32), 0, "q has shape"),  # head dim 32 against the keys' 64
    (lambda: rand(3, 6, 64), 0, "q has Hq=6 heads, not a multiple of Hkv=4"),
    (lambda: rand(45, 64), 1, "prefix_k has rank 2"),
    (lambda: rand(44, 2, 64), 2, "prefix_v has shape"),  # prefix_v's length differs from prefix_k's
    (lambda: rand(2, 7, 2, 64), 3, "suffix_k has shape"),  # 2 sequences where q has 3
    (lambda: rand(3, 7, 64), 4, "suffix_v has shape"),  # rank 3
])
def test_bad_shapes_raise_value_error_naming_the_argument(bad, index, name):
    args = list(one_level(hkv=4 if "Hkv=4" in name else 2))
    args[index] = bad()
    with pytest.raises(ValueError, match=name):
        hydragen.ops.hydragen_attention(*args)


def test_bad_suffix_lens_and_mode_raise_value_error():
    args = list(one_level())
    with pytest.raises(ValueError, match="suffix_lens"):
        hydragen.ops.hydragen_attention(*args[:5], [7, 0, 8])
    with pytest.raises(ValueError, match="suffix_lens"):
        hydragen.ops.hydragen_attention(*args[:5], [7, 0])
    with pytest.raises(ValueError, match="fast"):
        hydragen.ops.hydragen_attention(*args, mode="fast")
    with pytest.raises(ValueError, match="q: expected a NumPy array or a torch tensor"):
        hydragen.ops.hydragen_attention("not an array", *args[1:])
    with pytest.raises(ValueError, match="q: dtype code 0 of 64 bits"):
        hydragen.ops.hydragen_attention(args[0].astype(np.int64), *args[1:])


def test_a_tree_with_an_orphan_names_the_sequence():
    tree = SharingTree([], [Sequence(rand(4, 2, 64), rand(4, 2, 64), parent=3)])
    with pytest.raises(ValueError, match="sequence 0"):
        hydragen.ops.tree_attention(tree, rand(1, 4, 64))
