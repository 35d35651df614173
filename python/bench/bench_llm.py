#!/usr/bin/env python3
"""The Python binding's cost and score()'s sharing, on one device, JSON out.

generate: the same requests (one shared prefix of --prefix random tokens, --batch requests each
with a short suffix of its own, --samples samples of --new-tokens tokens) through
`hydragen generate --requests` (the CLI: its engine's prefill + decode seconds from its summary)
and LLM.generate (wall time of the call, the model built and warmed up before). overhead =
LLM wall / CLI engine time - 1; the issue's bar is 3%.

score: a --context-tokens context and --continuations x --continuation-tokens continuations:
llm.score(context, continuations) in hydragen mode (context prefilled once, continuations
through the sharing tree), against scoring each (context + continuation) alone in paged mode
(a prefix cache flush before each, so nothing is shared).

  python3 python/bench/bench_llm.py --device cuda --preset codellama-7b --cli build/hydragen \
      --out bench/results/python-binding-h200.json
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np


def import_hydragen(build):
    if build:
        sys.path.insert(0, os.path.join(build, "python"))
    import hydragen

    return hydragen


def requests(rng, args, vocab):
    prefix = rng.integers(3, vocab, args.prefix).tolist()
    return [prefix + rng.integers(3, vocab, args.suffix).tolist() for _ in range(args.batch)]


def cli_engine_seconds(args, prompts, seed):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "requests.jsonl")
        with open(path, "w") as f:
            for p in prompts:
                f.write(json.dumps({"prompt_ids": p, "n": args.samples, "max_tokens": args.new_tokens,
                                    "temperature": 0.8, "seed": seed}) + "\n")
        out = os.path.join(tmp, "out.jsonl")
        cmd = [args.cli, "generate", "--random-weights", args.preset, "--device", args.device, "--requests", path,
               "--output", out, "--no-progress", "--ignore-eos", "--max-batch", str(args.max_batch),
               "--attention", args.attention]
        if args.kv_memory:
            cmd += ["--kv-memory", args.kv_memory]
        start = time.perf_counter()
        run = subprocess.run(cmd, capture_output=True, text=True, check=True)
        wall = time.perf_counter() - start
        decode = float(re.search(r"decode: .* ([0-9.]+) s:", run.stderr).group(1))
        prefill = float(re.search(r"prefill: .*, ([0-9.]+) s", run.stderr).group(1))
        tokens = sum(len(json.loads(line)["tokens"]) for line in open(out))
        return {"engine_seconds": prefill + decode, "prefill_seconds": prefill, "decode_seconds": decode,
                "process_wall_seconds": wall, "tokens": tokens}


def bench_generate(hg, args, rng):
    llm = hg.LLM(random_weights=args.preset, device=args.device, attention=args.attention,
                 kv_memory=args.kv_memory or 0, max_batch=args.max_batch)
    prompts = requests(rng, args, llm.vocab_size)
    params = hg.SamplingParams(n=args.samples, temperature=0.8, seed=1, max_tokens=args.new_tokens, ignore_eos=True)
    llm.generate(prompts, params, use_tqdm=False)  # warm-up: graphs captured, pool touched
    runs = []
    for rep in range(args.repeats):
        llm.reset_prefix_cache()  # the CLI starts with an empty cache too
        start = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        wall = time.perf_counter() - start
        m = llm.metrics()
        runs.append({"wall_seconds": wall, "engine_seconds": m["prefill_seconds"] + m["decode_seconds"],
                     "tokens": sum(len(o.token_ids) for r in outs for o in r.outputs)})
    del llm
    cli = [cli_engine_seconds(args, prompts, 1) for _ in range(args.repeats)]
    best_py = min(r["wall_seconds"] for r in runs)
    best_cli = min(r["engine_seconds"] for r in cli)
    return {"requests": args.batch, "samples": args.samples, "prefix": args.prefix, "suffix": args.suffix,
            "new_tokens": args.new_tokens, "llm_generate": runs, "cli": cli,
            "llm_tokens_per_second": runs[0]["tokens"] / best_py, "cli_tokens_per_second": cli[0]["tokens"] / best_cli,
            "binding_overhead": best_py / best_cli - 1}


def bench_score(hg, args, rng):
    shared = hg.LLM(random_weights=args.preset, device=args.device, attention="hydragen",
                    kv_memory=args.kv_memory or 0, max_batch=args.max_batch)
    ctx = rng.integers(3, shared.vocab_size, args.context_tokens).tolist()
    conts = [rng.integers(3, shared.vocab_size, args.continuation_tokens).tolist() for _ in range(args.continuations)]
    shared.score(ctx, conts)  # warm-up
    times, result = [], None
    for _ in range(args.repeats):
        shared.reset_prefix_cache()
        start = time.perf_counter()
        result = shared.score(ctx, conts)
        times.append(time.perf_counter() - start)
    del shared
    paged = hg.LLM(random_weights=args.preset, device=args.device, attention="paged",
                   kv_memory=args.kv_memory or 0, max_batch=args.max_batch)
    paged.score(ctx, conts[:1])  # warm-up
    alone, alone_result = [], []
    for _ in range(args.repeats):
        total, alone_result = 0.0, []
        for c in conts:
            paged.reset_prefix_cache()
            start = time.perf_counter()
            alone_result += paged.score(ctx, [c])
            total += time.perf_counter() - start
        alone.append(total)
    diff = max(abs(a - b) for r, s in zip(result, alone_result) for a, b in zip(r.token_logprobs, s.token_logprobs))
    return {"context_tokens": args.context_tokens, "continuations": args.continuations,
            "continuation_tokens": args.continuation_tokens, "shared_seconds": times, "separate_paged_seconds": alone,
            "speedup": min(alone) / min(times), "max_logprob_difference": diff}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--preset", default="codellama-7b")
    ap.add_argument("--attention", default="hydragen")
    ap.add_argument("--cli", default="build/hydragen")
    ap.add_argument("--build", default="", help="a build directory whose python/ holds the package (else installed)")
    ap.add_argument("--kv-memory", default="", help="e.g. 40G (default: the device's free memory)")
    ap.add_argument("--max-batch", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--prefix", type=int, default=2048)
    ap.add_argument("--suffix", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--context-tokens", type=int, default=2048)
    ap.add_argument("--continuations", type=int, default=4)
    ap.add_argument("--continuation-tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip", choices=["generate", "score"], action="append", default=[])
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    hg = import_hydragen(args.build)
    rng = np.random.default_rng(0)
    report = {"device": args.device, "preset": args.preset, "attention": args.attention,
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        report["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    if "generate" not in args.skip:
        report["generate"] = bench_generate(hg, args, rng)
    if "score" not in args.skip:
        report["score"] = bench_score(hg, args, rng)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
