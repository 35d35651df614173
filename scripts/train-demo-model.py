#!/usr/bin/env python3
"""Trains the demo model (models/demo) from scratch, with one command:

  python3 scripts/train-demo-model.py            # CPU; resumes from build-demo/ where it can
  python3 scripts/train-demo-model.py --fresh    # starts over
  python3 scripts/train-demo-model.py --prepare-only --data DIR   # steps 1-2 and the tokens, no training
  scripts/demo-model-gpu OUTDIR                  # the committed model: 5 minutes on a GPU

1. the King James Version from Debian's bible-kjv (public domain; 1,189 chapters), one verse
   per line; every 50th chapter held out;
2. a byte-level BPE tokenizer (GPT-2 regex, 4,096 ids with BOS and EOS), written by
   scripts/demo/bpe.py and saved as a Hugging Face tokenizer.json;
3. a Llama (scripts/demo/llama.py: LlamaForCausalLM's math, tied embeddings) trained on
   windows of BOS + verses, with checkpoints in the work folder to resume from;
4. the Hugging Face folder models/demo (config.json, bf16 model.safetensors, tokenizer files,
   generation_config.json), and tests/fixtures/demo: the greedy tokens and logits of the
   exported weights in fp32, and the encoder's ids of a few hundred strings.
Needs Debian's python3-torch, python3-numpy, python3-regex and bible-kjv
(HYDRAGEN_SETUP_DEMO=1 scripts/setup installs them); the seed is fixed. The data folder
(kjv.json, tokenizer.json, tokens.pt) is made once and reused, so a machine without
bible-kjv (the GPU machine) trains from a data folder made here.
"""
import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts" / "demo"))
sys.path.insert(0, str(REPO / "scripts" / "reference"))

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle threads sleep: on a busy machine spinning wastes half the CPU
import torch  # noqa: E402

import bpe  # noqa: E402
import export  # noqa: E402
import kjv  # noqa: E402
import training  # noqa: E402
from llama import LlamaShape  # noqa: E402
from tokenizer import test_strings  # noqa: E402  (scripts/reference: the strings every tokenizer fixture uses)

SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>"]  # BOS, EOS
VOCAB_SIZE = 4096
SHAPE = LlamaShape(vocab_size=VOCAB_SIZE, hidden_size=256, intermediate_size=576, num_hidden_layers=6,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)  # 4.9M, 9.8 MB in bf16
HELD_OUT_EVERY = 50  # chapters


class Log:
    def __init__(self, path):
        self.file = open(path, "a", encoding="utf-8")

    def __call__(self, line):
        line = f"{time.strftime('%H:%M:%S')} {line}"
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()


def chapter_text(verses):
    return "".join(v + "\n" for v in verses)


def load_chapters(data):
    """The KJV's chapters, from data/kjv.json when it is there, else from bible-kjv (saved there)."""
    path = data / "kjv.json"
    if path.exists():
        return [tuple(c) for c in json.loads(path.read_text(encoding="utf-8"))]
    chapters = kjv.read_chapters()
    path.write_text(json.dumps(chapters, ensure_ascii=False), encoding="utf-8")
    return chapters


def make_tokenizer(chapters, work, log):
    path = work / "tokenizer.json"
    if path.exists():
        return bpe.load(path, *SPECIAL_TOKENS)
    start = time.time()
    texts = [v + "\n" for _, verses in chapters for v in verses]
    vocab, merges = bpe.train(texts, VOCAB_SIZE - 256 - len(SPECIAL_TOKENS))
    tokenizer = bpe.ByteLevelBpe(vocab, merges, SPECIAL_TOKENS, *SPECIAL_TOKENS)
    tokenizer.save(path)
    log(f"tokenizer: {tokenizer.vocab_size} ids, {len(merges)} merges, {time.time() - start:.0f} s")
    return tokenizer


def tokenize(chapters, tokenizer, work, log):
    """(training, held-out) TokenText: each chapter's verses, then EOS."""
    path = work / "tokens.pt"
    if path.exists():
        saved = torch.load(path)  # a dict of int64 tensors: loads with weights_only too
        return training.TokenText(*saved["train"]), training.TokenText(*saved["val"])
    eos = tokenizer.special[tokenizer.eos_token]
    parts = {"train": ([], []), "val": ([], [])}
    for index, (_, verses) in enumerate(chapters):
        tokens, starts = parts["val" if index % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else "train"]
        for verse in verses:
            starts.append(len(tokens))
            tokens.extend(tokenizer.encode(verse + "\n", add_special_tokens=False))
        tokens.append(eos)
    texts = {k: (torch.tensor(t, dtype=torch.int64), torch.tensor(s, dtype=torch.int64)) for k, (t, s) in parts.items()}
    torch.save(texts, path)
    log(f"tokens: {len(parts['train'][0])} training, {len(parts['val'][0])} held out")
    return training.TokenText(*texts["train"]), training.TokenText(*texts["val"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", default=str(REPO / "build-demo"), help="checkpoint and log")
    parser.add_argument("--data", help="the text, tokenizer and tokens (default: the work folder)")
    parser.add_argument("--out", default=str(REPO / "models" / "demo"), help="the Hugging Face folder")
    parser.add_argument("--fixtures", default=str(REPO / "tests" / "fixtures" / "demo"), help="reference fixtures")
    parser.add_argument("--prepare-only", action="store_true", help="make the data folder and stop")
    parser.add_argument("--device", default="cpu", help="torch device that trains (cpu, cuda)")
    parser.add_argument("--precision", choices=["fp32", "bf16"], help="bf16 autocast (default on cuda) or fp32")
    parser.add_argument("--steps", type=int, default=1200, help="optimizer steps (without --minutes)")
    parser.add_argument("--minutes", type=float, default=0.0, help="train for this long; the schedule follows it")
    parser.add_argument("--batch", type=int, default=8, help="windows per step")
    parser.add_argument("--lr", type=float, default=2e-3, help="peak learning rate")
    parser.add_argument("--dropout", type=float, default=0.0, help="residual dropout while training")
    parser.add_argument("--eval-every", type=int, default=250, help="steps between held-out evaluations")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--fresh", action="store_true", help="delete the work folder first")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    work, out, fixtures = Path(args.work), Path(args.out), Path(args.fixtures)
    data = Path(args.data) if args.data else work
    if args.fresh and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    data.mkdir(parents=True, exist_ok=True)
    log = Log(work / "train.log")

    chapters = load_chapters(data)
    tokenizer = make_tokenizer(chapters, data, log)
    train_text, val_text = tokenize(chapters, tokenizer, data, log)
    if args.prepare_only:
        log(f"data ready in {data}")
        return

    device = torch.device(args.device)
    precision = args.precision or ("bf16" if device.type == "cuda" else "fp32")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    config = training.TrainConfig(steps=args.steps, minutes=args.minutes, batch=args.batch, peak_lr=args.lr,
                                  dropout=args.dropout, eval_every=args.eval_every,
                                  log_every=100 if device.type == "cuda" else 20,
                                  checkpoint_every=1000 if device.type == "cuda" else 100)
    bos = tokenizer.special[tokenizer.bos_token]
    model, val_windows = training.train(SHAPE, config, train_text, val_text, bos, work / "checkpoint.pt", log,
                                        device, precision)

    export.export_checkpoint(model, SHAPE, tokenizer, out)
    exported = export.load_exported(out, SHAPE)
    log(f"held-out loss: fp32 {training.evaluate(model, val_windows):.4f}, "
        f"exported bf16 weights {training.evaluate(exported, val_windows):.4f}")
    export.record_reference(exported, tokenizer, fixtures, log)
    export.record_samples(exported, tokenizer, work / "samples.txt", seed=config.seed)
    corpus = "\n".join(chapter_text(v) for _, v in chapters)
    strings = test_strings(corpus) + [p for p in export.PROMPTS]
    export.record_tokenizer_cases(tokenizer, list(dict.fromkeys(strings)), fixtures, seed=config.seed)
    log(f"wrote {out} and {fixtures}")


if __name__ == "__main__":
    main()
