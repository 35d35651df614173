"""hydragen.ops: exact attention over a sharing tree, on NumPy arrays (CPU) and torch tensors
(CPU or CUDA), viewed in place through DLPack. Each returns (o, lse): o [rows, Hq, d] the
attention output, lse [rows, Hq] the natural-log sum of exp of the scaled scores, in the
framework of q. Bad shapes raise ValueError naming the argument."""
from dataclasses import dataclass, field
from typing import Any, List, Optional

from . import _hydragen
from ._arrays import as_input, as_output

__all__ = ["Segment", "Sequence", "SharingTree", "tree_attention", "hydragen_attention"]


@dataclass
class Segment:
    """A shared node: k, v [len, Hkv, d]; parent: the index of its parent segment, or None."""

    k: Any
    v: Any
    parent: Optional[int] = None


@dataclass
class Sequence:
    """A leaf: its own suffix k, v [len, Hkv, d] under segment `parent` (or None), and its
    query_tokens query rows (the last query_tokens positions of its context)."""

    k: Any
    v: Any
    parent: Optional[int] = None
    query_tokens: int = 1


@dataclass
class SharingTree:
    segments: List[Segment] = field(default_factory=list)
    sequences: List[Sequence] = field(default_factory=list)


def _parent(p):
    return -1 if p is None else int(p)


def tree_attention(tree, q, *, scale=None, causal=True, mode="hydragen", page_size=64):
    """Attention of q [sum query_tokens, Hq, d] (rows in sequence order) over each sequence's
    context (its ancestors' segments, then its suffix). mode: hydragen, paged or dense."""
    segments = [(_parent(s.parent), as_input(s.k, f"segments[{i}].k"), as_input(s.v, f"segments[{i}].v"))
                for i, s in enumerate(tree.segments)]
    sequences = [(_parent(s.parent), as_input(s.k, f"sequences[{i}].k"), as_input(s.v, f"sequences[{i}].v"),
                  int(s.query_tokens)) for i, s in enumerate(tree.sequences)]
    q_in = as_input(q, "q")
    o, lse = _hydragen.tree_attention(segments, sequences, q_in, scale, causal, mode, page_size)
    return as_output(o, q_in), as_output(lse, q_in)


def hydragen_attention(q, prefix_k, prefix_v, suffix_k, suffix_v, suffix_lens, *, scale=None, causal=True,
                       mode="hydragen", page_size=64):
    """One level of sharing: B sequences under one prefix.
    q [B, Hq, d] or [B, T, Hq, d]; prefix_k/v [P, Hkv, d]; suffix_k/v [B, S_max, Hkv, d], sequence b
    using its first suffix_lens[b] tokens. Returns o shaped like q and lse [B, Hq] or [B, T, Hq]."""
    args = [as_input(x, n) for x, n in ((q, "q"), (prefix_k, "prefix_k"), (prefix_v, "prefix_v"),
                                         (suffix_k, "suffix_k"), (suffix_v, "suffix_v"))]
    lens = [int(n) for n in suffix_lens]
    o, lse = _hydragen.hydragen_attention(*args, lens, scale, causal, mode, page_size)
    o, lse = as_output(o, args[0]), as_output(lse, args[0])
    shape = tuple(args[0].shape)
    if len(shape) == 4:  # rows b*T + t back to [B, T, ...] (a view)
        o = o.reshape(shape[0], shape[1], *o.shape[1:])
        lse = lse.reshape(shape[0], shape[1], *lse.shape[1:])
    return o, lse
