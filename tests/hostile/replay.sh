#!/bin/sh
# The hostile-input replay (issue 31): inputs a careless or hostile user gives `hydragen`,
# and the reproductions of what once crashed it, run against the real binary. Each must end
# with the exit status named (2 a wrong command line, 1 a file or model refused, 3 requests
# failed), stderr naming the flag, field or file, never by a signal and never in a hang.
#   replay.sh HYDRAGEN TINY_LLAMA_DIR TOKENIZER_DIR GROUP      (GROUP: flags | requests | files)
set -u
hy=$1 model=$(cd "$2" && pwd) tokenizer=$(cd "$3" && pwd) group=$4
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
failures=0
IN=/dev/null
export CUDA_VISIBLE_DEVICES=  # every case runs on the CPU; "cuda" finds no device even on a GPU machine

# check NAME STATUS PATTERN ARGS...: `hydragen ARGS` (stdin from $IN, /dev/null by default)
# exits with STATUS and its stderr matches the extended regex PATTERN.
check() {
  name=$1 want=$2 pattern=$3
  shift 3
  timeout 60 "$hy" "$@" <"$IN" >"$d/out" 2>"$d/err"
  got=$?
  if [ "$got" -eq 124 ]; then
    reason="hung (killed after 60 s)"
  elif [ "$got" -gt 128 ]; then
    reason="killed by signal $((got - 128))"
  elif [ "$got" -ne "$want" ]; then
    reason="exit status $got, expected $want"
  elif ! grep -Eq -- "$pattern" "$d/err"; then
    reason="stderr does not match /$pattern/"
  else
    echo "ok   $name"
    return 0
  fi
  echo "FAIL $name: $reason"
  sed 's/^/     | /' "$d/err" | head -n 8
  failures=$((failures + 1))
}

# A model directory: the tiny fixture's files linked, with the tokenizer when asked.
model_dir() {
  m=$d/$1
  mkdir -p "$m"
  ln -sf "$model/config.json" "$model/model.safetensors" "$m/"
  if [ "${2:-}" = tokenizer ]; then ln -sf "$tokenizer/tokenizer.json" "$tokenizer/tokenizer_config.json" "$m/"; fi
  echo "$m"
}

# expect_in_err NAME PATTERN: the stderr of the last check also matches PATTERN.
expect_in_err() {
  if grep -Eq -- "$2" "$d/err"; then echo "ok   $1"; else echo "FAIL $1: stderr does not match /$2/"; failures=$((failures + 1)); fi
}

# `n` times the text $2 (no newline).
repeat() { yes "$2" | head -n "$1" | tr -d '\n'; }

# config.json of the tiny fixture with "KEY": VALUE set.
config_with() { sed "s|\"$1\": [^,]*,|\"$1\": $2,|" "$model/config.json"; }

r="--random-weights tiny --device cpu --no-progress"
case $group in
  flags)
    check prompt-ids-past-int32 2 "--prompt-ids: item 1 \('4294967297'\) is not a token id" generate $r --prompt-ids 4294967297
    check stop-id-past-int32 2 "--stop-id: item 1 \('4294967298'\)" generate $r --prompt-ids 1 --stop-id 4294967298
    check prompt-id-outside-vocab 2 "--prompt-ids: id 5000 \(item 2\) is outside the model's vocabulary \[0, 4096\)" \
      generate $r --prompt-ids 1,5000
    check kv-memory-inf 2 "--kv-memory: expected a size" generate $r --prompt-ids 1 --kv-memory inf
    check kv-memory-1e30G 2 "--kv-memory: expected a size" generate $r --prompt-ids 1 --kv-memory 1e30G
    check kv-memory-huge 2 "--kv-memory: '9999999999G' is more than 1 PiB" generate $r --prompt-ids 1 --kv-memory 9999999999G
    check kv-memory-half-byte 2 "--kv-memory: '0.5' is less than one byte" generate $r --prompt-ids 1 --kv-memory 0.5
    check temperature-negative 2 "--temperature must be finite and >= 0" generate $r --prompt-ids 1 --temperature -1
    check temperature-nan 2 "--temperature: expected a finite number" generate $r --prompt-ids 1 --temperature nan
    check top-p-2 2 "--top-p must be in \(0, 1\]" generate $r --prompt-ids 1 --top-p 2
    check top-p-0 2 "--top-p must be in \(0, 1\]" generate $r --prompt-ids 1 --top-p 0
    check presence-penalty-3 2 "--presence-penalty must be in \[-2, 2\]" generate $r --prompt-ids 1 --presence-penalty 3
    check dash-n 2 "-n is ambiguous.*--samples N.*--max-new-tokens N" generate $r --prompt-ids 1 -n 4
    check max-new-tokens-past-context 2 "--max-new-tokens 5000: the model's context is 4096 positions" \
      generate $r --prompt-ids 1 --max-new-tokens 5000
    check stop-cut-multibyte 2 "--stop: .* is not valid UTF-8 \(byte 0\)" generate $r --prompt-ids 1 --stop "$(printf '\346\227')"
    check text-with-random-weights 2 "-p needs a tokenizer" generate $r -p hello
    check unknown-subcommand 2 "unknown subcommand 'frobnicate'; the subcommands are: bench, generate" frobnicate
    check unknown-bench 2 "hydragen bench: unknown subcommand 'nope'; the subcommands are: attention, e2e, host" bench nope
    check no-subcommand 2 "hydragen needs a subcommand: bench, generate"
    check unknown-flag 2 "--frobnicate" generate $r --prompt-ids 1 --frobnicate
    check cuda-without-device 1 "--device cuda: (this build has no CUDA backend|no CUDA device)" \
      generate --random-weights tiny --prompt-ids 1 --device cuda
    check bench-cuda-without-device 1 "--device cuda: (this build has no CUDA backend|no CUDA device)" \
      bench e2e --device cuda --presets tiny --batch 2 --prefix 16 --new-tokens 4
    ;;
  requests)
    m=$(model_dir requests tokenizer)
    deep=$(repeat 100000 '[')$(repeat 100000 ']')
    {
      printf '{"prompt_ids": [1, 2], "n": %s}\n' "$deep"
      printf '{"prompt_ids": [1], "stop": ["\377"]}\n'
      printf '{\342\200\234prompt_ids\342\200\235: [1]}\n'
      printf '{"prompt_ids": [1], "n": 0}\n'
      printf '{"prompt_ids": [1], "max_tokens": 5000}\n'
      printf '{"prompt_ids": [1, 2, 99999]}\n'
      printf '{"prompt": "the cat", "n": 1e30}\n'
      printf '{"prompt_ids": [1], "stop": "\346\227"}\n'
    } >"$d/bad.jsonl"
    check every-line-bad 3 "request 0: error: .*bad.jsonl:1: JSON nested deeper than 64 levels" \
      generate -m "$m" --device cpu --requests "$d/bad.jsonl"
    expect_in_err invalid-utf8-line "request 1: error: .*bad.jsonl:2: invalid UTF-8 at byte 30"
    expect_in_err typographic-quotes "request 2: error: .*bad.jsonl:3: not valid JSON at byte 1"
    expect_in_err n-0 "request 3: error: .*\"n\" is out of range \[1, 1048576\]: 0"
    expect_in_err max-tokens-past-context "request 4 sample 0: error: .*pass the model's context of 4096"
    expect_in_err id-outside-vocab "request 5 sample 0: error: prompt token 2 \(99999\) is outside the vocabulary"
    expect_in_err n-1e30 "request 6: error: .*\"n\" must be an integer"
    expect_in_err stop-cut-multibyte-line "request 7: error: .*bad.jsonl:8: invalid UTF-8"
    expect_in_err summary-names-failures "generate: 0 of 8 completions done, 8 failed \(request 0 \(line 1\), request 1 \(line 2\), "
    check every-line-bad-output 3 "8 failed" generate -m "$m" --device cpu --requests "$d/bad.jsonl" --output "$d/bad.out"
    if [ "$(grep -c '"finish_reason":"error"' "$d/bad.out")" = 8 ] && ! LC_ALL=C grep -q "$(printf '\377')" "$d/bad.out"; then
      echo "ok   output-holds-8-error-lines"
    else
      echo "FAIL output-holds-8-error-lines: --output does not hold 8 error lines in valid UTF-8"
      failures=$((failures + 1))
    fi
    yes '{"prompt_ids": [1, 99999]}' | head -n 35 >"$d/35.jsonl"
    check 35-of-35-bad 3 "0 of 35 completions done, 35 failed .*and 27 more requests" generate -m "$m" --device cpu --requests "$d/35.jsonl"
    printf '{"prompt_ids": [1, 17, 289]}\n{"prompt_ids": [99999]}\n' >"$d/mixed.jsonl"
    check one-of-two-bad 3 "1 of 2 completions done, 1 failed \(request 1 \(line 2\)" generate -m "$m" --device cpu --requests "$d/mixed.jsonl"
    if grep -q "=== request 0, sample 0 (length) ===" "$d/out"; then echo "ok   one-of-two-bad-prints-the-good-one"; else
      echo "FAIL one-of-two-bad: the good completion is missing"; failures=$((failures + 1)); fi
    check requests-dir 1 "--requests: .*: is a directory, not a regular file" generate -m "$m" --device cpu --requests "$d"
    check requests-dev-zero 1 "--requests: /dev/zero: is a character device" generate -m "$m" --device cpu --requests /dev/zero
    IN=/dev/zero
    check requests-stdin-dev-zero 1 "standard input is a character device" generate -m "$m" --device cpu --requests -
    IN=/dev/null
    mkfifo "$d/fifo"
    check requests-fifo 1 "is a FIFO \(named pipe\), not a regular file" generate -m "$m" --device cpu --requests "$d/fifo"
    check prompt-file-dir 1 "-f: .*: is a directory, not a regular file" generate -m "$m" --device cpu -f "$d"
    check prompt-file-fifo 1 "-f: .*fifo: is a FIFO" generate -m "$m" --device cpu -f "$d/fifo"
    : >"$d/empty.jsonl"
    check requests-empty 1 "--requests: .*empty.jsonl' holds no request" generate -m "$m" --device cpu --requests "$d/empty.jsonl"
    ;;
  files)
    check prompt-without-tokenizer 2 "-p: the model directory .* has no tokenizer" generate -m "$(model_dir bare)" --device cpu -p hello
    printf 'hello' >"$d/prompt.txt"
    check file-without-tokenizer 2 "-f: the model directory .* has no tokenizer" generate -m "$d/bare" --device cpu -f "$d/prompt.txt"
    m=$(model_dir deep-config) && rm "$m/config.json"
    { sed '$d' "$model/config.json" | sed '$s/$/,/'; printf '"x": %s%s}\n' "$(repeat 100000 '[')" "$(repeat 100000 ']')"; } >"$m/config.json"
    check config-deep 1 "config.json: JSON nested deeper than 64 levels at byte" generate -m "$m" --device cpu --prompt-ids 1
    m=$(model_dir utf8-config) && rm "$m/config.json"
    { printf '{"\377": 1,'; sed '1d' "$model/config.json"; } >"$m/config.json"
    check config-invalid-utf8 1 "config.json: invalid UTF-8 at byte 2" generate -m "$m" --device cpu --prompt-ids 1
    m=$(model_dir fewer-layers) && rm "$m/config.json" && config_with num_hidden_layers 1 >"$m/config.json"
    check config-fewer-layers 1 "9 tensors of the checkpoint .* not used by config.json \(LlamaForCausalLM with num_hidden_layers 1\)" \
      generate -m "$m" --device cpu --prompt-ids 1
    m=$(model_dir tied) && rm "$m/config.json" && config_with tie_word_embeddings true >"$m/config.json"
    check config-tied-with-lm-head 1 "\"lm_head.weight\" differs from \"model.embed_tokens.weight\".*tie_word_embeddings: true" \
      generate -m "$m" --device cpu --prompt-ids 1
    m=$(model_dir eps) && rm "$m/config.json" && config_with rms_norm_eps 1e308 >"$m/config.json"
    check config-absurd-eps 1 "config.json: rms_norm_eps 1e\+308 is outside" generate -m "$m" --device cpu --prompt-ids 1
    m=$(model_dir fifo-config) && rm "$m/config.json" && mkfifo "$m/config.json"
    check config-fifo 1 "config.json: is a FIFO \(named pipe\), not a regular file" generate -m "$m" --device cpu --prompt-ids 1
    m=$(model_dir dir-config) && rm "$m/config.json" && mkdir "$m/config.json"
    check config-dir 1 "config.json: is a directory, not a regular file" generate -m "$m" --device cpu --prompt-ids 1
    m=$(model_dir fifo-weights) && rm "$m/model.safetensors" && mkfifo "$m/model.safetensors"
    check weights-fifo 1 "model.safetensors: is a FIFO \(named pipe\), not a regular file" generate -m "$m" --device cpu --prompt-ids 1
    m=$(model_dir fifo-tokenizer) && mkfifo "$m/tokenizer.model"
    check tokenizer-fifo 1 "tokenizer.model: is a FIFO \(named pipe\), not a regular file" generate -m "$m" --device cpu --prompt-ids 1
    m=$(model_dir nan-weights) && rm "$m/model.safetensors" && cp "$model/model.safetensors" "$m/"
    size=$(wc -c <"$m/model.safetensors")
    printf '\000\000\300\177' | dd of="$m/model.safetensors" bs=1 seek=$((size - 4)) conv=notrunc 2>/dev/null
    check weights-nan 1 "model.safetensors: tensor \"[a-z_.0-9]+\" holds nan at element [0-9]+ .*must be finite" \
      generate -m "$m" --device cpu --prompt-ids 1
    m=$(model_dir deep-tokenizer) && printf '{"normalizer": %s{"type": "Lowercase"}%s}' \
      "$(repeat 10000 '{"type": "Sequence", "normalizers": [')" "$(repeat 10000 ']}')" >"$m/tokenizer.json"
    check tokenizer-deep 1 "tokenizer.json: JSON nested deeper than 64 levels" generate -m "$m" --device cpu --prompt-ids 1
    m=$(model_dir big-tokenizer) && ln -sf "$tokenizer/../sp_bpe/tokenizer.json" "$m/"
    check tokenizer-larger-than-model 1 "the tokenizer has 801 tokens but config.json's vocab_size is 512" \
      generate -m "$m" --device cpu --prompt-ids 1
    ;;
  *)
    echo "replay.sh: unknown group '$group'" >&2
    exit 2
    ;;
esac
echo "$failures failed"
[ "$failures" -eq 0 ]
