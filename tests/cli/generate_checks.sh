#!/bin/sh
# Checks of `hydragen generate` that compare runs with each other (tests/CMakeLists.txt runs
# one CASE per test and matches what it prints):
#   generate_checks.sh HYDRAGEN CASE [TINY_LLAMA_DIR TOKENIZER_DIR]
set -eu
hy=$1
# Two samples of a 4-token prompt, 6 new tokens each, random tiny weights; stdout only.
g() { "$hy" generate --random-weights tiny --device cpu --prompt-ids 1,2,3,4 --samples 2 --max-new-tokens 6 --no-progress "$@" 2>/dev/null; }
# A scratch model directory of the tiny fixture's files (config.json copied, to be edited).
scratch_model() {
  d=$(mktemp -d)
  trap 'rm -rf "$d"' EXIT
  t=$(cd "$1" && pwd)
  cp "$t/config.json" "$d/"
  ln -s "$t/model.safetensors" "$d/"
  if [ -n "${2:-}" ]; then s=$(cd "$2" && pwd) && ln -s "$s/tokenizer.json" "$s/tokenizer_config.json" "$d/"; fi
}
case $2 in
  sampling-flags)  # each filter, pushed to its limit, leaves only the greedy token
    greedy=$(g --temperature 0)
    [ "$(g --temperature 1 --seed 3 --top-k 1)" = "$greedy" ] && echo "top-k 1 is greedy"
    [ "$(g --temperature 1 --seed 3 --top-p 0.000001)" = "$greedy" ] && echo "top-p 1e-6 is greedy"
    [ "$(g --temperature 1 --seed 3 --min-p 1)" = "$greedy" ] && echo "min-p 1 is greedy"
    [ "$(g --temperature 1 --seed 3)" != "$greedy" ] && echo "temperature 1 samples"
    ;;
  penalty-flags)  # each penalty reaches the sampler (the greedy run repeats a token here); one out of range is a
    # usage error naming the flag
    greedy=$(g --temperature 0)
    [ "$(g --presence-penalty -2)" != "$greedy" ] && echo "presence penalty changes the tokens"
    [ "$(g --frequency-penalty 2)" != "$greedy" ] && echo "frequency penalty changes the tokens"
    [ "$(g --repetition-penalty 0.01)" != "$greedy" ] && echo "repetition penalty changes the tokens"
    status=0 && out=$("$hy" generate --random-weights tiny --prompt-ids 1,2,3,4 --presence-penalty 3 2>&1) || status=$?
    echo "$out" | grep -o -e "--presence-penalty must be in \[-2, 2\]"
    echo "exit status $status"
    ;;
  seeds)
    a=$(g --temperature 0.9 --seed 7)
    [ "$(g --temperature 0.9 --seed 7)" = "$a" ] && echo "same seed, same tokens"
    [ "$(g --temperature 0.9 --seed 8)" != "$a" ] && echo "another seed, other tokens"
    ;;
  summary)  # stderr: the closing summary (and no progress bar: stderr is no terminal)
    "$hy" generate --random-weights tiny --device cpu --prompt-ids 1,2,3,4 --samples 4 --max-new-tokens 6 \
      --temperature 0.9 2>&1 >/dev/null | tr '\r' '#'
    ;;
  progress-on-a-terminal)  # the same run under a pseudo-terminal (script(1)) draws the bar
    script -qec "$hy generate --random-weights tiny --device cpu --prompt-ids 1,2,3,4 --samples 4 --max-new-tokens 6 --temperature 0.9 >/dev/null" /dev/null |
      tr '\r' '\n'
    ;;
  kv-memory)  # 8 samples of 5 pages each in a pool of 10: they take turns, none fails; a bad size is named
    "$hy" generate --random-weights tiny --device cpu --prompt-ids 1,2,3,4 --samples 8 --max-new-tokens 60 \
      --page-size 16 --kv-memory 320K --no-progress 2>&1 >/dev/null
    "$hy" generate --random-weights tiny --device cpu --prompt-ids 1,2,3,4 --kv-memory 12X 2>&1 || true
    ;;
  prompt-file)  # -f reads the prompt that -p gives (from a file or standard input); a missing file is named
    scratch_model "$3" "$4"
    printf 'the cat' >"$d/prompt.txt"
    a=$("$hy" generate -m "$d" --device cpu -f "$d/prompt.txt" --max-new-tokens 8 --ignore-eos 2>/dev/null)
    b=$("$hy" generate -m "$d" --device cpu -p 'the cat' --max-new-tokens 8 --ignore-eos 2>/dev/null)
    c=$(printf 'the cat' | "$hy" generate -m "$d" --device cpu -f - --max-new-tokens 8 --ignore-eos 2>/dev/null)
    [ -n "$a" ] && [ "$a" = "$b" ] && [ "$c" = "$b" ] && echo "-f reads the prompt -p gives"
    "$hy" generate -m "$d" --device cpu -f "$d/missing.txt" 2>&1 | grep -q -e "-f: .*missing.txt: cannot open" &&
      echo "a missing -f file is named"
    ;;
  requests-stdin)  # --requests - reads standard input; OpenAI's "prompt" as token ids and "max_tokens"
    printf '{"prompt": [1, 2, 3], "n": 2, "max_tokens": 3, "temperature": 0.5, "seed": 4}\n' |
      "$hy" generate --random-weights tiny --device cpu --requests - --no-progress 2>&1
    ;;
  eos-from-config)  # without a tokenizer, EOS is config.json's eos_token_id, or generation_config.json's
    scratch_model "$3"
    run() { "$hy" generate -m "$d" --device cpu --prompt-ids 1,17,289,45,3,500,77,128 --max-new-tokens 8 "$@" 2>/dev/null; }
    sed -i 's/"eos_token_id": 2/"eos_token_id": 224/' "$d/config.json"
    echo "config: $(run)"
    printf '{"eos_token_id": [309, 2]}' >"$d/generation_config.json"
    echo "generation_config: $(run)"
    echo "ignore-eos: $(run --ignore-eos)"
    ;;
  greedy-samples-warn)  # several samples at temperature 0 are identical: said on stderr
    "$hy" generate --random-weights tiny --device cpu --prompt-ids 1,2 --samples 3 --max-new-tokens 2 2>&1 >/dev/null
    ;;
  help)  # --help names the sample and token counts so neither a llama.cpp nor a vLLM user misreads them
    "$hy" generate --help
    ;;
  vocab-past-the-tokenizer)  # the model samples ids 480-511 the tokenizer lacks: they decode to nothing
    scratch_model "$3" "$4"
    "$hy" generate -m "$d" --device cpu -p 'the cat' --samples 16 --temperature 3 --max-new-tokens 32 --ignore-eos \
      --output "$d/out.jsonl" 2>&1 && echo "exit status 0"
    grep -Eq '[[,](4[89][0-9]|5[01][0-9])[],]' "$d/out.jsonl" && echo "ids past the tokenizer were sampled"
    ;;
  *)
    echo "generate_checks.sh: unknown case '$2'" >&2
    exit 2
    ;;
esac
