"""The trained demo model as a Hugging Face checkpoint folder, and the reference fixtures
that hydragen's tests compare against: the torch model's greedy tokens and logits from the
exported (bf16) weights, and the Python encoder's ids of a few hundred strings."""
import json
import random

import torch

import safetensors_io
from llama import LlamaForCausalLM, LlamaShape, greedy, sample

WEIGHT_DTYPE = torch.bfloat16
PROMPTS = ["And God said", "In the beginning", "The LORD is my shepherd", "Blessed are the",
           "And it came to pass", "For God so loved"]
GREEDY_TOKENS = 48


def write_json(path, obj):
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def export_checkpoint(model, shape: LlamaShape, tokenizer, out):
    """config.json, model.safetensors (bf16, lm_head tied), tokenizer.json,
    tokenizer_config.json and generation_config.json into out."""
    out.mkdir(parents=True, exist_ok=True)
    bos, eos = tokenizer.special[tokenizer.bos_token], tokenizer.special[tokenizer.eos_token]
    write_json(out / "config.json", {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": shape.vocab_size,
        "hidden_size": shape.hidden_size, "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_hidden_layers, "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads, "head_dim": shape.head_dim,
        "max_position_embeddings": shape.max_position_embeddings, "rms_norm_eps": shape.rms_norm_eps,
        "rope_theta": shape.rope_theta, "rope_scaling": None, "hidden_act": "silu",
        "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False, "initializer_range": 0.02,
        "tie_word_embeddings": True, "bos_token_id": bos, "eos_token_id": eos, "use_cache": True,
        "torch_dtype": "bfloat16"})
    tensors = {name: t.to(WEIGHT_DTYPE) for name, t in model.state_dict().items()}
    safetensors_io.save(tensors, out / "model.safetensors", metadata={"format": "pt"})
    tokenizer.save(out / "tokenizer.json")
    write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": tokenizer.bos_token,
        "eos_token": tokenizer.eos_token, "add_bos_token": True, "clean_up_tokenization_spaces": False,
        "model_max_length": shape.max_position_embeddings})
    write_json(out / "generation_config.json", {
        "bos_token_id": bos, "eos_token_id": eos, "do_sample": True, "temperature": 0.8, "top_p": 0.95,
        "max_new_tokens": 64})


def load_exported(folder, shape: LlamaShape):
    """The exported weights in an fp32 model: what an fp32 engine computes from the files."""
    model = LlamaForCausalLM(shape)
    tensors = {k: v.float() for k, v in safetensors_io.load(folder / "model.safetensors").items()}
    model.load_state_dict(tensors)
    return model.eval()


def record_reference(model, tokenizer, fixtures, log):
    """reference.json (prompts, greedy tokens and text, smallest top-2 margins) and
    reference_logits.safetensors (F32 logits.<i> [prompt length, vocab] of every prompt)."""
    fixtures.mkdir(parents=True, exist_ok=True)
    eos = tokenizer.special[tokenizer.eos_token]
    record = {"prompts": [], "greedy_tokens": GREEDY_TOKENS, "weights": "models/demo/model.safetensors in fp32"}
    logits = {}
    with torch.no_grad():
        for i, text in enumerate(PROMPTS):
            ids = tokenizer.encode(text)
            tokens, margin = greedy(model, ids, GREEDY_TOKENS, stop_ids=(eos,))
            logits[f"logits.{i}"] = model(torch.tensor([ids]))[0].float().contiguous()
            record["prompts"].append({"text": text, "ids": ids, "greedy": tokens, "min_margin": margin,
                                      "greedy_text": tokenizer.decode(tokens)})
            log(f"reference: {text!r} -> {tokenizer.decode(tokens)!r} (smallest top-2 gap {margin:.4f})")
    write_json(fixtures / "reference.json", record)
    safetensors_io.save(logits, fixtures / "reference_logits.safetensors")


def record_tokenizer_cases(tokenizer, strings, fixtures, seed):
    """tokenizer_expected.json, laid out as the tokenizer fixtures' expected.json: each
    string's ids without and with BOS and their decodings, and the decodings of random id
    sequences (byte pieces that do not form UTF-8 included)."""
    cases = []
    for s in strings:
        ids = tokenizer.encode(s, add_special_tokens=False)
        with_bos = tokenizer.encode(s, add_special_tokens=True)
        cases.append({"text": s, "ids": ids, "ids_with_special": with_bos, "decoded": tokenizer.decode(ids),
                      "decoded_with_special": tokenizer.decode(with_bos),
                      "decoded_skip_special": tokenizer.decode(with_bos, skip_special_tokens=True)})
    rng = random.Random(seed)
    random_decodes = []
    for _ in range(40):
        ids = [rng.randrange(tokenizer.vocab_size) for _ in range(rng.randint(1, 12))]
        random_decodes.append({"ids": ids, "text": tokenizer.decode(ids),
                               "text_skip_special": tokenizer.decode(ids, skip_special_tokens=True)})
    write_json(fixtures / "tokenizer_expected.json", {"library": "scripts/demo/bpe.py", "cases": cases,
                                                      "random_decodes": random_decodes})


def record_samples(model, tokenizer, path, seed, per_prompt=4, new_tokens=64):
    """A few sampled continuations (temperature 0.8) of each prompt, to read what the model writes."""
    eos = tokenizer.special[tokenizer.eos_token]
    generator = torch.Generator().manual_seed(seed)
    lines = []
    for text in PROMPTS:
        for i, tokens in enumerate(sample(model, tokenizer.encode(text), new_tokens, per_prompt, generator,
                                          stop_id=eos)):
            lines.append(f"[{text!r} sample {i}] {text}{tokenizer.decode(tokens, skip_special_tokens=True)}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
