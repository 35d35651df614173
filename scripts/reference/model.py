#!/usr/bin/env python3
"""Model reference fixtures for hydragen's forward-pass tests (issue 4).

Builds tiny random Llama-family models with transformers, saves each in the Hugging Face
layout and records what transformers computes for fixed prompts:
  tiny-llama    LlamaForCausalLM, GQA 4/2, untied lm_head
  tiny-qwen2    Qwen2ForCausalLM, q/k/v bias, MQA 4/1, tied embeddings, rope_theta 1e6
  tiny-llama31  LlamaForCausalLM, rope_scaling llama3 (all three frequency bands), explicit
                head_dim (q size != hidden), MHA, tied embeddings
  tiny-llama-d64  LlamaForCausalLM, head_dim 64 (a head dim the CUDA attention kernels take),
                GQA 4/2, q size 256 != hidden 128, untied lm_head: the GPU tests' fixture. Its
                seed is the one of SEED_CANDIDATES whose greedy runs are varied (>= MIN_DISTINCT
                different tokens; tied tiny models just repeat their last token) with the
                widest margin, so bf16 rounding does not flip a greedy token.
  tiny-qwen3    Qwen3ForCausalLM: RMSNorm on each q and k head before RoPE, explicit head_dim
                (q size 128 != hidden 64), GQA 4/2, tied, rope_theta 1e6
  tiny-llama32  LlamaForCausalLM as Llama 3.2: tied, head_dim 64, GQA 4/1, rope_scaling llama3
                factor 32
  tiny-phi3     Phi3ForCausalLM: fused qkv_proj and gate_up_proj, head_dim 96, GQA 2/1
  tiny-mistral03  MistralForCausalLM as v0.3: no sliding window, head_dim 64, GQA 4/2,
                rope_theta 1e6
The last three and tiny-llama-d64 have CUDA head dims and pick their seed as described.
Each folder gets:
  config.json                 the classic Hub layout (rope_theta + rope_scaling), what we parse
  config.transformers5.json   the same config as this transformers saves it (rope_parameters)
  model.safetensors           fp32 weights as transformers reads them (tied lm_head omitted)
  reference_logits.safetensors  F32 logits.<i> [T_i, vocab] for every position of prompt i
  reference.json              prompts, greedy continuations (32 tokens, argmax, full
                              recompute each step), RoPE inv_freq, last-token hidden states
The reference numbers come from the model re-loaded from the saved files, on the CPU in fp32
with eager attention, so they are exactly what transformers makes of these files.
"""
import json
import math
import tempfile
from pathlib import Path

GREEDY_TOKENS = 32
SEED = 1234

COMMON = dict(hidden_act="silu", rms_norm_eps=1e-5, vocab_size=512, max_position_embeddings=4096,
              bos_token_id=1, eos_token_id=2, torch_dtype="float32", initializer_range=0.02)
VARIANTS = {
    "tiny-llama": dict(COMMON, architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=64,
                       intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       rope_theta=10000.0, rope_scaling=None, tie_word_embeddings=False, attention_bias=False,
                       mlp_bias=False),
    "tiny-qwen2": dict(COMMON, architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_size=64,
                       intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                       rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False,
                       sliding_window=4096, max_window_layers=2),
    "tiny-llama31": dict(COMMON, architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=48, head_dim=16,
                         intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                         rope_theta=500000.0, tie_word_embeddings=True, attention_bias=False, mlp_bias=False,
                         rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                           original_max_position_embeddings=1024)),
    "tiny-llama-d64": dict(COMMON, architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=128,
                           head_dim=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, rope_theta=10000.0, rope_scaling=None, tie_word_embeddings=False,
                           attention_bias=False, mlp_bias=False),
    "tiny-qwen3": dict(COMMON, architectures=["Qwen3ForCausalLM"], model_type="qwen3", hidden_size=64,
                       head_dim=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, rope_theta=1000000.0, rope_scaling=None, rms_norm_eps=1e-6,
                       tie_word_embeddings=True, attention_bias=False, use_sliding_window=False,
                       sliding_window=None, max_window_layers=2),
    "tiny-llama32": dict(COMMON, architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=128,
                         head_dim=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=1, rope_theta=500000.0, tie_word_embeddings=True,
                         attention_bias=False, mlp_bias=False,
                         rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                           high_freq_factor=4.0, original_max_position_embeddings=1024)),
    "tiny-phi3": dict(COMMON, architectures=["Phi3ForCausalLM"], model_type="phi3", hidden_size=192,
                      intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                      rope_theta=10000.0, rope_scaling=None, tie_word_embeddings=False, pad_token_id=0,
                      sliding_window=None, original_max_position_embeddings=4096, partial_rotary_factor=1.0,
                      resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0),
    "tiny-mistral03": dict(COMMON, architectures=["MistralForCausalLM"], model_type="mistral", hidden_size=128,
                           head_dim=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, rope_theta=1000000.0, rope_scaling=None, sliding_window=None,
                           tie_word_embeddings=False),
}
SEED_CANDIDATES = {name: range(SEED, SEED + 64)
                   for name in ("tiny-llama-d64", "tiny-llama32", "tiny-phi3", "tiny-mistral03")}
MIN_DISTINCT = 12  # of GREEDY_TOKENS, in each greedy run of a chosen seed


def prompts(vocab):
    """Fixed prompts: one token, a short one, and two longer pseudo-random ones (an LCG)."""
    state = 12345
    def lcg(n):
        nonlocal state
        out = []
        for _ in range(n):
            state = (state * 1103515245 + 12345) % (1 << 31)
            out.append(3 + state % (vocab - 3))
        return out
    return [[1], [1, 17, 289, 45, 3, 500, 77, 128], [1] + lcg(19), [1] + lcg(29)]


def init_weights(model, torch, seed=SEED):
    """Deterministic weights with enough spread that logits are far from ties."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            elif "embed_tokens" in name or name == "lm_head.weight":
                p.copy_(noise * (3.0 / math.sqrt(p.shape[1])))
            else:
                p.copy_(noise / math.sqrt(p.shape[1]))


def load_model(folder, transformers):
    try:
        return transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager")
    except TypeError:
        return transformers.AutoModelForCausalLM.from_pretrained(folder)


def greedy_run(model, torch, prompt):
    """GREEDY_TOKENS argmax tokens after prompt (full recompute each step) and the smallest
    top-1 / top-2 logit gap seen."""
    tokens = list(prompt)
    margins = []
    with torch.no_grad():
        for _ in range(GREEDY_TOKENS):
            last = model(input_ids=torch.tensor([tokens])).logits[0, -1].float()
            top = torch.topk(last, 2)
            margins.append(float(top.values[0] - top.values[1]))
            tokens.append(int(top.indices[0]))
    return tokens[len(prompt):], min(margins)


def widest_margin_seed(name, config, model, torch):
    """The seed of SEED_CANDIDATES[name] whose greedy runs are varied (each has MIN_DISTINCT
    different tokens) and have the largest smallest margin; the most varied if none is."""
    candidates = list(SEED_CANDIDATES.get(name, [SEED]))
    if len(candidates) == 1:
        return candidates[0]
    runs = prompts(config["vocab_size"])
    def score(seed):
        init_weights(model, torch, seed)
        greedy = [greedy_run(model, torch, runs[i]) for i in (1, 2)]
        distinct = min(len(set(tokens)) for tokens, _ in greedy)
        return (min(distinct, MIN_DISTINCT), min(margin for _, margin in greedy))
    return max(candidates, key=score)


def make_variant(name, config, out, torch, transformers, save_file):
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    hf_config = transformers.AutoConfig.from_pretrained(folder)
    try:
        model = transformers.AutoModelForCausalLM.from_config(hf_config, attn_implementation="eager")
    except TypeError:
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
    model = model.float().eval()
    seed = widest_margin_seed(name, config, model, torch)
    init_weights(model, torch, seed)
    tensors = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    if config.get("tie_word_embeddings"):
        tensors.pop("lm_head.weight", None)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with tempfile.TemporaryDirectory() as tmp:
        hf_config.save_pretrained(tmp)
        (folder / "config.transformers5.json").write_text((Path(tmp) / "config.json").read_text())

    model = load_model(folder, transformers).float().eval()  # what transformers makes of the files
    record = dict(variant=name, transformers=transformers.__version__, torch=torch.__version__, seed=seed,
                  prompts=prompts(config["vocab_size"]), greedy=[])
    logits = {}
    with torch.no_grad():
        for i, prompt in enumerate(record["prompts"]):
            out_i = model(input_ids=torch.tensor([prompt]), output_hidden_states=(i == 1))
            logits[f"logits.{i}"] = out_i.logits[0].float().contiguous()
            if i == 1:
                record["hidden_last"] = [h[0, -1].tolist() for h in out_i.hidden_states]
        for i in (1, 2):
            tokens, margin = greedy_run(model, torch, record["prompts"][i])
            record["greedy"].append(dict(prompt_index=i, tokens=tokens, min_margin=margin))
        rotary = getattr(model.model, "rotary_emb", None)
        if rotary is not None and hasattr(rotary, "inv_freq"):
            record["inv_freq"] = rotary.inv_freq.float().tolist()
            record["attention_scaling"] = float(getattr(rotary, "attention_scaling", 1.0))
    save_file(logits, str(folder / "reference_logits.safetensors"))
    (folder / "reference.json").write_text(json.dumps(record) + "\n")
    return {"variant": name, "seed": seed, "min_margin": min(g["min_margin"] for g in record["greedy"])}


def make_model_fixtures(out_dir, variants=None):
    """Writes every variant (or those named in `variants`) under out_dir; returns a summary.
    A failing variant is reported, the others still run."""
    import torch
    import transformers
    from safetensors.torch import save_file
    torch.manual_seed(SEED)
    out = Path(out_dir)
    summary = []
    unknown = set(variants or []) - set(VARIANTS)
    if unknown:
        raise ValueError(f"unknown variants {sorted(unknown)}; known: {sorted(VARIANTS)}")
    for name, config in VARIANTS.items():
        if variants and name not in variants:
            continue
        try:
            summary.append(make_variant(name, config, out, torch, transformers, save_file))
        except Exception as error:  # keep going: one call of device time makes all of them
            import traceback
            traceback.print_exc()
            summary.append({"variant": name, "error": repr(error)})
    return summary


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description="model reference fixtures")
    parser.add_argument("--out", required=True)
    parser.add_argument("--variant", action="append", help="make only this variant (repeatable)")
    args = parser.parse_args()
    print(json.dumps(make_model_fixtures(args.out, args.variant), indent=2))
