"""A Llama decoder (LlamaForCausalLM's math) in plain torch, for the demo model.

Same computation as transformers' modeling_llama in eager mode: RMSNorm in fp32 with
rms_norm_eps, RoPE in the rotate_half convention (cos/sin of cat(freqs, freqs)), causal
softmax attention with GQA, SwiGLU MLP, pre-norm residual blocks, a final norm and an
lm_head tied to the embeddings. Parameter names are the Hub's (model.layers.N.self_attn.
q_proj.weight, ...), so state_dict() is a checkpoint our loader and transformers read.
"""
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class LlamaShape:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    @property
    def head_dim(self):
        return self.hidden_size // self.num_attention_heads

    def as_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_tables(shape: LlamaShape, positions):
    """cos, sin [T, head_dim] of HF's default rotary embedding at the given positions."""
    d = shape.head_dim
    exponents = torch.arange(0, d, 2, dtype=torch.int64, device=positions.device).float() / d
    inv_freq = 1.0 / (shape.rope_theta ** exponents)
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, shape: LlamaShape):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = (shape.num_attention_heads, shape.num_key_value_heads,
                                                    shape.head_dim)
        self.scaling = self.head_dim ** -0.5
        h = shape.hidden_size
        self.q_proj = nn.Linear(h, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, h, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = self.heads // self.kv_heads
        k = k.repeat_interleave(group, dim=1)  # HF's repeat_kv: query head i reads kv head i // group
        v = v.repeat_interleave(group, dim=1)
        if x.is_cuda:  # under autocast q and k are fp32 after RoPE, v is bf16: one dtype for the fused kernel
            q, k = q.to(v.dtype), k.to(v.dtype)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scaling)
        else:
            scores = torch.matmul(q, k.transpose(2, 3)) * self.scaling + mask
            probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            out = torch.matmul(probs, v)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, shape: LlamaShape):
        super().__init__()
        self.gate_proj = nn.Linear(shape.hidden_size, shape.intermediate_size, bias=False)
        self.up_proj = nn.Linear(shape.hidden_size, shape.intermediate_size, bias=False)
        self.down_proj = nn.Linear(shape.intermediate_size, shape.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, shape: LlamaShape, dropout):
        super().__init__()
        self.self_attn = Attention(shape)
        self.mlp = MLP(shape)
        self.input_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.dropout = nn.Dropout(dropout)  # identity in eval mode: inference is LlamaForCausalLM's

    def forward(self, x, cos, sin, mask):
        x = x + self.dropout(self.self_attn(self.input_layernorm(x), cos, sin, mask))
        return x + self.dropout(self.mlp(self.post_attention_layernorm(x)))


class LlamaModel(nn.Module):
    def __init__(self, shape: LlamaShape, dropout):
        super().__init__()
        self.embed_tokens = nn.Embedding(shape.vocab_size, shape.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(shape, dropout) for _ in range(shape.num_hidden_layers))
        self.norm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    """lm_head is the embedding matrix (tie_word_embeddings), so the state dict has no
    lm_head.weight, as tied Hub checkpoints omit it."""

    def __init__(self, shape: LlamaShape, dropout=0.0):
        super().__init__()
        self.shape = shape
        self.model = LlamaModel(shape, dropout)

    def init_weights(self, generator, std=0.02):
        """HF's initializer: normal(0, initializer_range) for matrices, ones for norms."""
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                else:
                    p.copy_(torch.randn(p.shape, generator=generator) * std)

    def forward(self, ids):
        """Logits [B, T, vocab] (fp32 for an fp32 model) of token ids [B, T] at positions 0..T-1."""
        _, t = ids.shape
        x = self.model.embed_tokens(ids)
        cos, sin = rope_tables(self.shape, torch.arange(t, device=ids.device))
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        mask = torch.full((t, t), float("-inf"), dtype=x.dtype, device=ids.device).triu(1)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        return F.linear(self.model.norm(x), self.model.embed_tokens.weight)

    def parameter_count(self):
        return sum(p.numel() for p in self.parameters())


@torch.no_grad()
def greedy(model, prompt, new_tokens, stop_ids=()):
    """Argmax continuation (full recompute each step, as the reference fixtures do) and the
    smallest top-1 / top-2 logit gap along the way."""
    tokens = list(prompt)
    margins = []
    for _ in range(new_tokens):
        last = model(torch.tensor([tokens]))[0, -1]
        top = torch.topk(last, 2)
        margins.append(float(top.values[0] - top.values[1]))
        tokens.append(int(top.indices[0]))
        if tokens[-1] in stop_ids:
            break
    return tokens[len(prompt):], min(margins)


@torch.no_grad()
def sample(model, prompt, new_tokens, count, generator, temperature=0.8, stop_id=None):
    """count sampled continuations at the given temperature, decoded together (full
    recompute each step); each is cut after its first stop_id."""
    rows = torch.tensor([list(prompt)] * count)
    for _ in range(new_tokens):
        probs = F.softmax(model(rows)[:, -1].float() / temperature, dim=-1)
        rows = torch.cat([rows, torch.multinomial(probs, 1, generator=generator)], dim=1)
    out = []
    for row in rows[:, len(prompt):].tolist():
        out.append(row[:row.index(stop_id) + 1] if stop_id in row else row)
    return out
