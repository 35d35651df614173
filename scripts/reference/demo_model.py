#!/usr/bin/env python3
"""The demo model (models/demo, made by scripts/train-demo-model.py without these libraries)
checked against the independent implementations, on a machine that has them:
  tokenizers    tokenizer.json's ids and decodings of every string of
                tests/fixtures/demo/tokenizer_expected.json (the training encoder's), and
                transformers' AutoTokenizer on the same strings;
  transformers  LlamaForCausalLM from the folder, fp32, eager attention: the logits of every
                prompt of tests/fixtures/demo/reference.json (relative error) and its greedy
                continuation (argmax, full recompute each step, stops at EOS).
Writes OUT/check.json; its "ok" is false when anything differs. With --write-reference, and
only when the model's checks pass, reference.json and reference_logits.safetensors are rewritten
from transformers' logits and greedy tokens (what hydragen's tests then compare against).

  python3 scripts/reference/demo_model.py --out DIR [--model DIR] [--fixtures DIR]
                                          [--write-reference] [--require]
  python3 scripts/make-reference.py --only demo --out DIR     (the committed model, checks only)
Without --require, missing libraries skip the check with a message (exit 0); with it they
are an error (exit 1), as is any difference.
"""
import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "demo"
FIXTURES = REPO / "tests" / "fixtures" / "demo"
LOGITS_TOLERANCE = 1e-4  # relative, as the model fixtures' CPU tests


def check_tokenizer(model_dir, expected):
    from tokenizers import Tokenizer
    from tokenizer import transformers_check  # scripts/reference/tokenizer.py
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    mismatches = []
    for c in expected["cases"]:
        ids = tok.encode(c["text"], add_special_tokens=False).ids
        with_special = tok.encode(c["text"], add_special_tokens=True).ids
        if ids != c["ids"] or with_special != c["ids_with_special"]:
            mismatches.append({"text": c["text"], "ids": ids, "ids_with_special": with_special})
        for ids_of, skip, key in ((c["ids"], False, "decoded"), (c["ids_with_special"], False, "decoded_with_special"),
                                  (c["ids_with_special"], True, "decoded_skip_special")):
            if tok.decode(ids_of, skip_special_tokens=skip) != c[key]:
                mismatches.append({"text": c["text"], key: tok.decode(ids_of, skip_special_tokens=skip)})
    for r in expected["random_decodes"]:
        for skip, key in ((False, "text"), (True, "text_skip_special")):
            if tok.decode(r["ids"], skip_special_tokens=skip) != r[key]:
                mismatches.append({"ids": r["ids"], key: tok.decode(r["ids"], skip_special_tokens=skip)})
    return {"strings": len(expected["cases"]), "mismatch_count": len(mismatches), "mismatches": mismatches[:20],
            "transformers": transformers_check(model_dir, expected["cases"])}


def load_model(model_dir):
    import torch
    import transformers
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                                                  attn_implementation="eager")
    except TypeError:
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    return model.eval()


def transformers_reference(model, reference):
    """Per prompt: the logits of every position, the greedy continuation and its smallest
    top-1 / top-2 logit gap."""
    import torch
    eos = model.config.eos_token_id
    results = []
    with torch.no_grad():
        for p in reference["prompts"]:
            logits = model(input_ids=torch.tensor([p["ids"]])).logits[0].float().contiguous()
            tokens, margins = list(p["ids"]), []
            for _ in range(reference["greedy_tokens"]):
                top = torch.topk(model(input_ids=torch.tensor([tokens])).logits[0, -1].float(), 2)
                margins.append(float(top.values[0] - top.values[1]))
                tokens.append(int(top.indices[0]))
                if tokens[-1] == eos:
                    break
            results.append({"logits": logits, "greedy": tokens[len(p["ids"]):], "min_margin": min(margins)})
    return results


def check_model(model, reference, fixtures_dir):
    import torch
    import transformers
    from safetensors.torch import load_file
    expected_logits = load_file(str(fixtures_dir / "reference_logits.safetensors"))
    results = transformers_reference(model, reference)
    prompts = []
    for i, (p, r) in enumerate(zip(reference["prompts"], results)):
        want = expected_logits[f"logits.{i}"]
        error = float((r["logits"] - want).norm() / want.norm())
        prompts.append({"text": p["text"], "logits_relative_error": error, "greedy_equal": r["greedy"] == p["greedy"],
                        "greedy": r["greedy"], "min_margin": r["min_margin"]})
    ok = all(p["greedy_equal"] and p["logits_relative_error"] < LOGITS_TOLERANCE for p in prompts)
    return {"transformers": transformers.__version__, "torch": torch.__version__, "ok": ok, "prompts": prompts}, results


def write_reference(reference, results, fixtures_dir):
    """reference.json and reference_logits.safetensors from transformers' results (its greedy
    tokens equal the torch model's, checked before, so greedy_text stays)."""
    import transformers
    from safetensors.torch import save_file
    record = dict(reference)
    record["weights"] = "models/demo/model.safetensors in fp32"
    record["source"] = f"transformers {transformers.__version__} LlamaForCausalLM, fp32, eager attention"
    record["prompts"] = [dict(p, greedy=r["greedy"], min_margin=r["min_margin"])
                         for p, r in zip(reference["prompts"], results)]
    (fixtures_dir / "reference.json").write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n",
                                                 encoding="utf-8")
    save_file({f"logits.{i}": r["logits"] for i, r in enumerate(results)},
              str(fixtures_dir / "reference_logits.safetensors"))


def check_demo(out_dir, model_dir=MODEL, fixtures_dir=FIXTURES, rewrite_reference=False):
    out, model_dir, fixtures_dir = Path(out_dir), Path(model_dir), Path(fixtures_dir)
    out.mkdir(parents=True, exist_ok=True)
    expected = json.loads((fixtures_dir / "tokenizer_expected.json").read_text(encoding="utf-8"))
    reference = json.loads((fixtures_dir / "reference.json").read_text(encoding="utf-8"))
    model_check, results = check_model(load_model(model_dir), reference, fixtures_dir)
    result = {"model_dir": str(model_dir), "tokenizer": check_tokenizer(model_dir, expected), "model": model_check}
    transformers_tok = result["tokenizer"]["transformers"]
    result["ok"] = (result["tokenizer"]["mismatch_count"] == 0 and transformers_tok.get("mismatch_count") == 0
                    and result["model"]["ok"])
    if rewrite_reference and result["model"]["ok"]:  # the model's reference does not wait on the tokenizer's
        write_reference(reference, results, fixtures_dir)
        result["reference_rewritten_from_transformers"] = str(fixtures_dir)
    (out / "check.json").write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for check.json")
    parser.add_argument("--model", default=str(MODEL), help="the Hugging Face folder")
    parser.add_argument("--fixtures", default=str(FIXTURES), help="its reference fixtures")
    parser.add_argument("--write-reference", action="store_true",
                        help="when the model checks pass, rewrite the fixtures' logits and greedy tokens from transformers")
    parser.add_argument("--require", action="store_true", help="missing libraries are an error, not a skip")
    args = parser.parse_args()
    try:
        result = check_demo(args.out, args.model, args.fixtures, args.write_reference)
    except ImportError as error:
        message = f"demo check: {error}: needs transformers, tokenizers and safetensors"
        if args.require:
            sys.exit(f"error: {message} (--require)")
        print(f"skipped: {message}")
        return
    print(json.dumps({"ok": result["ok"], "tokenizer_mismatches": result["tokenizer"]["mismatch_count"],
                      "transformers_tokenizer": result["tokenizer"]["transformers"],
                      "prompts": [{k: p[k] for k in ("text", "logits_relative_error", "greedy_equal", "min_margin")}
                                  for p in result["model"]["prompts"]]}, indent=1))
    if not result["ok"]:
        sys.exit(f"error: the demo model or its tokenizer differs from transformers/tokenizers: see {args.out}/check.json")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
