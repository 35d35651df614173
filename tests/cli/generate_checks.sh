#!/bin/sh
# Checks of `hydragen generate` that compare runs with each other (tests/CMakeLists.txt runs
# one CASE per test and matches what it prints):
#   generate_checks.sh HYDRAGEN CASE [TINY_LLAMA_DIR SP_TOKENIZER_DIR]
set -eu
hy=$1
# Two samples of a 4-token prompt, 6 new tokens each, random tiny weights; stdout only.
g() { "$hy" generate --random-weights tiny --prompt-ids 1,2,3,4 -n 2 --max-new-tokens 6 --no-progress "$@" 2>/dev/null; }
case $2 in
  sampling-flags)  # each filter, pushed to its limit, leaves only the greedy token
    greedy=$(g --temperature 0)
    [ "$(g --temperature 1 --seed 3 --top-k 1)" = "$greedy" ] && echo "top-k 1 is greedy"
    [ "$(g --temperature 1 --seed 3 --top-p 0.000001)" = "$greedy" ] && echo "top-p 1e-6 is greedy"
    [ "$(g --temperature 1 --seed 3 --min-p 1)" = "$greedy" ] && echo "min-p 1 is greedy"
    [ "$(g --temperature 1 --seed 3)" != "$greedy" ] && echo "temperature 1 samples"
    ;;
  penalty-flags)  # each penalty reaches the sampler (the greedy run repeats a token here); one out of range is named
    greedy=$(g --temperature 0)
    [ "$(g --presence-penalty -2)" != "$greedy" ] && echo "presence penalty changes the tokens"
    [ "$(g --frequency-penalty 2)" != "$greedy" ] && echo "frequency penalty changes the tokens"
    [ "$(g --repetition-penalty 0.01)" != "$greedy" ] && echo "repetition penalty changes the tokens"
    "$hy" generate --random-weights tiny --prompt-ids 1,2,3,4 --presence-penalty 3 --no-progress 2>&1 | grep -o \
      "presence_penalty must be in \[-2, 2\]"
    ;;
  seeds)
    a=$(g --temperature 0.9 --seed 7)
    [ "$(g --temperature 0.9 --seed 7)" = "$a" ] && echo "same seed, same tokens"
    [ "$(g --temperature 0.9 --seed 8)" != "$a" ] && echo "another seed, other tokens"
    ;;
  progress-and-summary)  # stderr: the progress line (carriage returns made newlines), then the summary
    "$hy" generate --random-weights tiny --prompt-ids 1,2,3,4 -n 4 --max-new-tokens 6 --temperature 0.9 2>&1 >/dev/null |
      tr '\r' '\n'
    ;;
  kv-memory)  # 8 samples of 5 pages each in a pool of 10: they take turns, none fails; a bad size is named
    "$hy" generate --random-weights tiny --prompt-ids 1,2,3,4 -n 8 --max-new-tokens 60 --page-size 16 --kv-memory 320K \
      --no-progress 2>&1 >/dev/null
    "$hy" generate --random-weights tiny --prompt-ids 1,2,3,4 --kv-memory 12X 2>&1 || true
    ;;
  prompt-file)  # -f reads the prompt that -p gives; a missing file is named
    d=$(mktemp -d)
    trap 'rm -rf "$d"' EXIT
    t=$(cd "$3" && pwd) s=$(cd "$4" && pwd)
    ln -s "$t/config.json" "$t/model.safetensors" "$s/tokenizer.json" "$s/tokenizer_config.json" "$d/"
    printf 'the cat' >"$d/prompt.txt"
    a=$("$hy" generate -m "$d" -f "$d/prompt.txt" --max-new-tokens 8 --ignore-eos 2>/dev/null)
    b=$("$hy" generate -m "$d" -p 'the cat' --max-new-tokens 8 --ignore-eos 2>/dev/null)
    [ -n "$a" ] && [ "$a" = "$b" ] && echo "-f reads the prompt -p gives"
    "$hy" generate -m "$d" -f "$d/missing.txt" 2>&1 | grep -q -e "-f: cannot open" && echo "a missing -f file is named"
    ;;
  *)
    echo "generate_checks.sh: unknown case '$2'" >&2
    exit 2
    ;;
esac
