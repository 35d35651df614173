"""LLM.generate against `hydragen generate` for the same requests (tokens and logprobs), and
the API's own rules: n, seeds, stop tokens and strings, logprobs, segments, streaming,
Ctrl-C, bad input."""
import json
import os
import subprocess
import threading

import numpy as np
import pytest

import hydragen
from hydragen import SamplingParams

from conftest import ROOT

SHARED = [1, 17, 289, 45, 3, 500, 77, 128, 9, 31, 400, 12]


def run_cli(cli, tmp_path, lines, *model):
    requests, output = tmp_path / "requests.jsonl", tmp_path / "out.jsonl"
    requests.write_text("".join(json.dumps(line) + "\n" for line in lines))
    run = subprocess.run([cli, "generate", *model, "--device", "cpu", "--requests", str(requests), "--output",
                          str(output), "--no-progress"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    got = {}
    for line in output.read_text().splitlines():
        c = json.loads(line)
        got[(c["request"], c["sample"])] = c
    return got


def cli_line(prompt, p):
    line = {"prompt_ids": prompt, "n": p.n, "max_tokens": p.max_tokens, "temperature": p.temperature,
            "top_p": p.top_p, "top_k": p.top_k, "min_p": p.min_p, "seed": p.seed, "stop_token_ids": p.stop_token_ids,
            "presence_penalty": p.presence_penalty, "frequency_penalty": p.frequency_penalty,
            "repetition_penalty": p.repetition_penalty}
    return {k: v for k, v in line.items() if v is not None}


def test_generate_equals_the_cli(tiny, cli, tmp_path):
    sampled = SamplingParams(temperature=1.0, seed=21, max_tokens=10)
    free = tiny.generate([SHARED], sampled, use_tqdm=False)[0].outputs[0].token_ids
    stop_at = free[4]
    cases = [
        (SHARED, SamplingParams(temperature=0, max_tokens=10)),
        (SHARED[:8] + [7, 7, 7], SamplingParams(n=3, temperature=0.9, seed=5, max_tokens=12)),
        (SHARED + [5], SamplingParams(n=2, temperature=1.1, top_k=20, top_p=0.9, min_p=0.01, seed=11,
                                      max_tokens=9, presence_penalty=0.5, repetition_penalty=1.2)),
        (SHARED, SamplingParams(temperature=1.0, seed=21, max_tokens=10, stop_token_ids=[stop_at])),
    ]
    outs = tiny.generate([c[0] for c in cases], [c[1] for c in cases], use_tqdm=False)
    ref = run_cli(cli, tmp_path, [cli_line(*c) for c in cases], "--random-weights", "tiny")
    assert len(outs) == len(cases)
    for r, (out, (prompt, p)) in enumerate(zip(outs, cases)):
        assert out.prompt_token_ids == prompt and out.finished
        assert [o.index for o in out.outputs] == list(range(p.n))
        for o in out.outputs:
            c = ref[(r, o.index)]
            assert o.token_ids == c["tokens"], (r, o.index)
            assert o.finish_reason == c["finish_reason"]
            np.testing.assert_allclose(o.cumulative_logprob, sum(c["logprobs"]), rtol=1e-5, atol=1e-5)
    stopped = outs[3].outputs[0]
    assert stopped.finish_reason == "stop" and stopped.token_ids == free[:free.index(stop_at) + 1]
    samples = [o.token_ids for o in outs[1].outputs]
    assert samples[0] != samples[1] or samples[1] != samples[2], "n = 3 samples at temperature 0.9 all alike"


def test_seeds_reproduce_and_differ(tiny):
    p = SamplingParams(n=2, temperature=1.0, seed=42, max_tokens=12)
    a = tiny.generate(SHARED, p, use_tqdm=False)[0]
    b = tiny.generate(SHARED, p, use_tqdm=False)[0]
    c = tiny.generate(SHARED, SamplingParams(n=2, temperature=1.0, seed=43, max_tokens=12), use_tqdm=False)[0]
    assert [o.token_ids for o in a.outputs] == [o.token_ids for o in b.outputs]
    assert [o.token_ids for o in a.outputs] != [o.token_ids for o in c.outputs]
    assert a.outputs[1].token_ids == c.outputs[0].token_ids  # sample i uses seed + i


def test_logprobs_are_the_sampled_tokens_and_match_the_cli(tiny, cli, tmp_path):
    p = SamplingParams(temperature=0.7, seed=3, max_tokens=6, logprobs=1)
    out = tiny.generate([SHARED], p, use_tqdm=False)[0].outputs[0]
    ref = run_cli(cli, tmp_path, [cli_line(SHARED, p)], "--random-weights", "tiny")[(0, 0)]
    assert len(out.logprobs) == len(out.token_ids) == 6
    for entry, token, lp in zip(out.logprobs, out.token_ids, ref["logprobs"]):
        assert token in entry and len(entry) <= 2 and entry[token] <= 0  # the sampled one and the top-1
        assert entry[token] == pytest.approx(lp, abs=1e-5)
    assert tiny.generate([SHARED], SamplingParams(max_tokens=2), use_tqdm=False)[0].outputs[0].logprobs is None


def test_segments_pin_the_tree_and_change_nothing(tiny):
    p = SamplingParams(temperature=0, max_tokens=6)
    plain = tiny.generate([SHARED], p, use_tqdm=False)[0].outputs[0].token_ids
    pinned = tiny.generate([{"segment_ids": [SHARED[:5], SHARED[5:9], SHARED[9:]]}], p, use_tqdm=False)
    assert pinned[0].outputs[0].token_ids == plain and pinned[0].prompt_token_ids == SHARED


def test_generate_stream_yields_every_token_then_the_completion(tiny):
    p = SamplingParams(n=2, temperature=0.8, seed=9, max_tokens=7)
    whole = tiny.generate([SHARED, SHARED[:6]], p, use_tqdm=False)
    streamed, finals = {}, {}
    for request, sample, item in tiny.generate_stream([SHARED, SHARED[:6]], p):
        if isinstance(item, hydragen.CompletionOutput):
            finals[(request, sample)] = item
        else:
            assert (request, sample) not in finals
            streamed.setdefault((request, sample), []).extend(item)
    for r, out in enumerate(whole):
        for o in out.outputs:
            assert streamed[(r, o.index)] == o.token_ids == finals[(r, o.index)].token_ids


def test_a_stream_left_early_cancels_its_requests(tiny):
    stream = tiny.generate_stream([SHARED] * 3, SamplingParams(temperature=1.0, seed=2, max_tokens=500))
    next(stream)
    stream.close()
    assert tiny._engine.running == 0 and tiny._engine.waiting == 0
    assert len(tiny.generate(SHARED, SamplingParams(temperature=0, max_tokens=3),
                             use_tqdm=False)[0].outputs[0].token_ids) == 3


def test_text_prompts_and_stop_strings_match_the_cli(cli, tmp_path):
    demo = os.path.join(ROOT, "models", "demo")
    llm = hydragen.LLM(model=demo, device="cpu", kv_memory="32MiB", page_size=16)
    prompts = ["In the beginning God created", "And the LORD spake unto Moses, saying"]
    greedy = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=24), use_tqdm=False)
    assert all(o.outputs[0].text == llm.decode(o.outputs[0].token_ids) for o in greedy)
    stop = greedy[0].outputs[0].text.split()[2]  # a word it will generate
    p = SamplingParams(temperature=0, max_tokens=24, stop=[stop])
    outs = llm.generate(prompts, p, use_tqdm=False)
    lines = [{"prompt": t, "max_tokens": 24, "temperature": 0, "stop": [stop]} for t in prompts]
    ref = run_cli(cli, tmp_path, lines, "-m", demo)
    for r, out in enumerate(outs):
        assert out.prompt == prompts[r] and out.prompt_token_ids == llm.encode(prompts[r])
        assert out.outputs[0].token_ids == ref[(r, 0)]["tokens"]
        assert out.outputs[0].text == ref[(r, 0)]["text"]
    assert outs[0].outputs[0].finish_reason == "stop" and stop not in outs[0].outputs[0].text


def test_ctrl_c_cancels_cleanly_and_the_engine_runs_on(tiny):
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), 2))  # SIGINT while generating
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        tiny.generate([SHARED] * 8, SamplingParams(temperature=1.0, seed=1, max_tokens=3000, ignore_eos=True),
                      use_tqdm=False)
    timer.join()
    assert tiny._engine.running == 0 and tiny._engine.waiting == 0
    again = tiny.generate([SHARED], SamplingParams(temperature=0, max_tokens=3), use_tqdm=False)
    assert len(again[0].outputs[0].token_ids) == 3


def test_a_second_thread_is_refused_while_a_step_runs(tiny):
    errors, done = [], threading.Event()

    def other():
        while not done.is_set():
            try:
                tiny.metrics()
            except ValueError as e:
                errors.append(str(e))
                return

    t = threading.Thread(target=other)
    t.start()
    try:
        tiny.generate([SHARED] * 4, SamplingParams(temperature=0, max_tokens=300, ignore_eos=True), use_tqdm=False)
    finally:
        done.set()
        t.join()
    assert errors and "busy in another thread" in errors[0]


def test_progress_bar_on_stderr_when_asked(tiny, capfd, monkeypatch):
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    tiny.generate([SHARED], SamplingParams(temperature=0, max_tokens=4))
    assert "generate [" in capfd.readouterr().err
    tiny.generate([SHARED], SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
    assert "generate [" not in capfd.readouterr().err


def test_bad_input(tiny):
    with pytest.raises(ValueError, match="top_p"):
        tiny.generate([SHARED], SamplingParams(top_p=0.0), use_tqdm=False)
    with pytest.raises(ValueError, match="n must be >= 1"):
        tiny.generate([SHARED], SamplingParams(n=0), use_tqdm=False)
    with pytest.raises(ValueError, match="2 given for 1 prompts"):
        tiny.generate([SHARED], [SamplingParams(), SamplingParams()], use_tqdm=False)
    with pytest.raises(ValueError, match="no tokenizer"):
        tiny.generate("text without a tokenizer", use_tqdm=False)
    with pytest.raises(ValueError, match="token ids must be integers"):
        tiny.generate([[1, 2.5]], use_tqdm=False)
    assert tiny.generate(np.array(SHARED), SamplingParams(temperature=0, max_tokens=2),
                         use_tqdm=False)[0].prompt_token_ids == SHARED  # NumPy ids: one prompt
    with pytest.raises(ValueError, match="exactly one of"):
        tiny.generate([{"prompt": "a", "segments": ["b"]}], use_tqdm=False)
    out = tiny.generate([[1, 2, 99999], SHARED], SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)
    assert out[0].outputs[0].finish_reason == "error" and "outside the vocabulary" in out[0].outputs[0].error
    assert out[1].outputs[0].finish_reason == "length"  # the malformed one failed alone
    with pytest.raises(ValueError, match="random_weights"):
        hydragen.LLM(device="cpu")
    with pytest.raises(ValueError, match="no-such-preset"):
        hydragen.LLM(random_weights="no-such-preset", device="cpu")
    with pytest.raises(ValueError, match="kv_memory"):
        hydragen.LLM(random_weights="tiny", device="cpu", kv_memory="lots")
    with pytest.raises(ValueError, match="attention|mode"):
        hydragen.LLM(random_weights="tiny", device="cpu", attention="fast")
