"""float64 NumPy references: plain attention, and the Llama forward pass (for scoring)."""
import numpy as np


def attention(q, k, v, causal_rows=None, scale=None):
    """q [T, Hq, d] over k, v [S, Hkv, d] (GQA); the T queries the last T positions when causal.
    Returns o [T, Hq, d], lse [T, Hq] in float64."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    t, hq, d = q.shape
    s, hkv, _ = k.shape
    g = hq // hkv
    scale = 1 / np.sqrt(d) if scale is None else scale
    kk, vv = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)  # [S, Hq, d]
    scores = np.einsum("thd,shd->hts", q, kk) * scale
    if causal_rows:
        mask = np.arange(s)[None, :] > (s - t + np.arange(t))[:, None]
        scores = np.where(mask[None], -np.inf, scores)
    m = scores.max(axis=-1, keepdims=True)
    p = np.exp(scores - m)
    z = p.sum(axis=-1, keepdims=True)
    o = np.einsum("hts,shd->thd", p / z, vv)
    lse = (m + np.log(z))[..., 0].T
    return o, lse


def _rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _rope(x, positions, theta):  # x [T, H, d], Hugging Face's rotate_half layout
    d = x.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    ang = positions[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1))[:, None], np.sin(np.concatenate([ang, ang], -1))[:, None]
    half = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], -1)
    return x * cos + half * sin


def llama_logits(w, tokens, layers, heads, kv_heads, eps=1e-6, theta=10000.0):
    """Logits [T, vocab] of a plain Llama (no biases, tied or not) at every position."""
    w = {k: np.asarray(v, dtype=np.float64) for k, v in w.items()}
    x = w["model.embed_tokens.weight"][tokens]
    t = len(tokens)
    pos = np.arange(t, dtype=np.float64)
    for i in range(layers):
        p = f"model.layers.{i}."
        h = _rms(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(t, heads, -1)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(t, kv_heads, -1)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(t, kv_heads, -1)
        o, _ = attention(_rope(q, pos, theta), _rope(k, pos, theta), v, causal_rows=True)
        x = x + o.reshape(t, -1) @ w[p + "self_attn.o_proj.weight"].T
        h = _rms(x, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return _rms(x, w["model.norm.weight"], eps) @ head.T


def log_softmax(logits):
    m = logits.max(-1, keepdims=True)
    return logits - m - np.log(np.exp(logits - m).sum(-1, keepdims=True))
