"""LLM: offline generation and scoring over the hydragen engine, in the shape of vLLM's LLM.

The engine runs one step per call into the extension with the GIL released; the loop is here,
so Ctrl-C (KeyboardInterrupt) lands between two steps: every request still running is
cancelled, the engine drained, and the exception re-raised."""
import numbers
import sys
import time

from . import _hydragen
from .outputs import CompletionOutput, RequestOutput, ScoreOutput
from .sampling_params import SamplingParams

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def _bytes(value, name):
    """An int of bytes, or text like '2GiB' / '512 MiB'."""
    if isinstance(value, bool):
        raise ValueError(f"LLM: {name} must be bytes or text like '2GiB', got {value!r}")
    if isinstance(value, int):
        return value
    text = str(value).strip().lower()
    number = text.rstrip("abcdefghijklmnopqrstuvwxyz ").strip()
    unit = text[len(number):].strip()
    try:
        if unit not in _UNITS:
            raise ValueError
        return int(float(number) * _UNITS[unit])
    except ValueError:
        raise ValueError(f"LLM: {name} must be bytes or text like '2GiB', got {value!r}") from None


class _Progress:
    """A tqdm-style bar of sampled tokens on stderr."""

    def __init__(self, total, enabled):
        self.total, self.done, self.enabled = max(total, 1), 0, enabled
        self.start = self.last = time.monotonic()

    def update(self, tokens):
        self.done += tokens
        now = time.monotonic()
        if self.enabled and (now - self.last > 0.2 or self.done >= self.total):
            self.last = now
            self._draw(now)

    def _draw(self, now):
        frac = min(self.done / self.total, 1.0)
        bar = "#" * int(30 * frac) + "-" * (30 - int(30 * frac))
        rate = self.done / max(now - self.start, 1e-9)
        sys.stderr.write(f"\rgenerate [{bar}] {self.done}/{self.total} tokens, {rate:.1f} tok/s")
        sys.stderr.flush()

    def close(self):
        if self.enabled:
            self._draw(time.monotonic())
            sys.stderr.write("\n")


class LLM:
    """A model on a device with its engine. model: a Hugging Face model directory (config.json,
    safetensors, tokenizer), or random_weights: a preset name (presets/: tiny, llama-3-8b, ...).
    attention: hydragen, paged, dense or none. kv_memory: the KV pool's bytes (int or '4GiB';
    0: the device's free memory after the weights, 1 GiB on the CPU)."""

    def __init__(self, model=None, *, random_weights=None, device="auto", attention="hydragen", kv_memory=0,
                 page_size=64, max_batch=256, max_step_tokens=2048, weights_seed=0, cuda_graphs=True):
        if device == "auto":
            device = "cuda" if _hydragen.cuda_built else "cpu"
        c = _hydragen._EngineConfig()
        c.model = "" if model is None else str(model)
        c.random_weights = "" if random_weights is None else str(random_weights)
        c.device, c.attention = str(device), str(attention)
        c.kv_memory = _bytes(kv_memory, "kv_memory")
        c.page_size, c.max_batch, c.max_step_tokens = int(page_size), int(max_batch), int(max_step_tokens)
        c.weights_seed, c.cuda_graphs = int(weights_seed), bool(cuda_graphs)
        self._engine = _hydragen._Engine(c)
        self.device = c.device

    # ---- text ------------------------------------------------------------------------------
    @property
    def vocab_size(self):
        return self._engine.vocab_size

    def encode(self, text, add_special_tokens=True):
        return self._engine.encode(text, add_special_tokens)

    def decode(self, ids, skip_special_tokens=True):
        return self._engine.decode(list(ids), skip_special_tokens)

    def _prompt(self, prompt, i):
        """(text or None, token ids, segment ends) of one prompt: text, token ids, or a dict of
        "prompt" / "prompt_token_ids" / "segments" (texts) / "segment_ids" (id lists)."""
        if isinstance(prompt, str):
            return prompt, self.encode(prompt), []
        if isinstance(prompt, dict):
            keys = [k for k in ("prompt", "prompt_token_ids", "segments", "segment_ids") if k in prompt]
            if len(keys) != 1 or len(prompt) != 1:
                raise ValueError(f"prompts[{i}]: give exactly one of 'prompt', 'prompt_token_ids', 'segments', "
                                 f"'segment_ids', got {sorted(prompt)}")
            key, value = keys[0], prompt[keys[0]]
            if key == "prompt":
                return self._prompt(value, i)
            if key == "prompt_token_ids":
                return None, self._ids(value, f"prompts[{i}].prompt_token_ids"), []
            if not isinstance(value, (list, tuple)) or not value:
                raise ValueError(f"prompts[{i}].{key} must be a non-empty list")
            ids, ends = [], []
            for j, piece in enumerate(value):
                if key == "segments":
                    if not isinstance(piece, str):
                        raise ValueError(f"prompts[{i}].segments[{j}] must be text, got {type(piece).__name__}")
                    ids += self.encode(piece, add_special_tokens=(j == 0))  # BOS once, before the first
                else:
                    ids += self._ids(piece, f"prompts[{i}].segment_ids[{j}]")
                ends.append(len(ids))
            return ("".join(value) if key == "segments" else None), ids, ends
        return None, self._ids(prompt, f"prompts[{i}]"), []

    @staticmethod
    def _ids(value, name):
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise ValueError(f"{name}: expected text or a list of token ids, got {value!r:.80}")
        ids = list(value)
        if not all(isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in ids):
            raise ValueError(f"{name}: token ids must be integers, got {ids!r:.80}")
        return [int(t) for t in ids]

    def _prompts(self, prompts):
        if isinstance(prompts, (str, dict)) or (hasattr(prompts, "__len__") and len(prompts) > 0
                                                and all(isinstance(t, numbers.Integral) for t in prompts)):
            prompts = [prompts]
        return [self._prompt(p, i) for i, p in enumerate(prompts)]

    # ---- generation --------------------------------------------------------------------------
    def _submit_all(self, prompts, sampling_params):
        parsed = self._prompts(prompts)
        if sampling_params is None:
            sampling_params = SamplingParams()
        params = sampling_params if isinstance(sampling_params, (list, tuple)) else [sampling_params] * len(parsed)
        if len(params) != len(parsed):
            raise ValueError(f"sampling_params: {len(params)} given for {len(parsed)} prompts")
        natives = [p._native() for p in params]  # every check before anything is submitted
        outputs, ids = [], []
        for i, ((text, tokens, ends), p, native) in enumerate(zip(parsed, params, natives)):
            stop_ids = list(p.stop_token_ids) + ([] if p.ignore_eos else list(self._engine.eos_token_ids))
            rid = self._engine.submit(tokens, p.n, native, p.max_tokens, stop_ids, p.stop_strings(), ends, [])
            ids.append(rid)
            outputs.append(RequestOutput(request_id=rid, prompt=text, prompt_token_ids=tokens,
                                         outputs=[None] * p.n))
        return outputs, ids, params

    def _steps(self, ids, events):
        """One engine step per iteration: (tokens sampled, token events, completions). Closed
        early (Ctrl-C, an exception, a consumer that stops), it cancels `ids` and drains the
        engine, so the next call starts idle."""
        done = False
        try:
            more = True
            while more:
                more, tokens, evs, finished = self._engine.step(events)
                yield tokens, evs, finished
            done = True
        finally:
            if not done:
                for rid in ids:
                    self._engine.cancel(rid)
                while self._engine.step(False)[0]:
                    pass

    def _run(self, ids, on_step, total=0, use_tqdm=False):
        """Steps until idle, on_step(events, finished) after each, a progress bar of `total` tokens."""
        progress = _Progress(total, use_tqdm)
        steps = self._steps(ids, False)
        try:
            for tokens, evs, finished in steps:
                progress.update(tokens)
                on_step(evs, finished)
        finally:
            steps.close()
            progress.close()

    def _completion(self, c, params):
        request, sample, tokens, logprobs, reason, error, top = c
        per_token = None
        if params.logprobs is not None:  # vLLM's shape: {token: logprob}, the sampled one and the top-N
            per_token = []
            for i, (t, lp) in enumerate(zip(tokens, logprobs)):
                entry = dict(top[i]) if i < len(top) else {}
                entry[t] = lp
                per_token.append(entry)
        return CompletionOutput(
            index=sample, text=self._engine.text(tokens, params.stop_strings()), token_ids=list(tokens),
            cumulative_logprob=float(sum(logprobs)), logprobs=per_token, finish_reason=reason, error=error)

    def generate(self, prompts, sampling_params=None, *, use_tqdm=True):
        """One RequestOutput per prompt, in order, each with its n samples in order. A
        malformed request (a token outside the vocabulary, a prompt past the context) fails
        alone: its outputs carry finish_reason 'error' and the error."""
        outputs, ids, params = self._submit_all(prompts, sampling_params)
        by_id = {rid: (out, p) for rid, out, p in zip(ids, outputs, params)}

        def on_step(_events, finished):
            for c in finished:
                out, p = by_id[c[0]]
                out.outputs[c[1]] = self._completion(c, p)
                out.finished = all(o is not None for o in out.outputs)

        total = sum(p.n * p.max_tokens for p in params)
        self._run(ids, on_step, total=total, use_tqdm=use_tqdm and sys.stderr.isatty())
        return outputs

    def generate_stream(self, prompts, sampling_params=None):
        """Yields (request index, sample, new token ids) as tokens come, then, for each sample
        as it finishes, (request index, sample, CompletionOutput)."""
        outputs, ids, params = self._submit_all(prompts, sampling_params)
        index = {rid: i for i, rid in enumerate(ids)}
        pending = []

        def on_step(events, finished):
            new = {}
            for rid, sample, token, _lp in events:
                new.setdefault((index[rid], sample), []).append(token)
            pending.extend((i, s, toks) for (i, s), toks in new.items())
            for c in finished:
                pending.append((index[c[0]], c[1], self._completion(c, params[index[c[0]]])))

        steps = self._steps(ids, True)
        try:
            for _tokens, events, finished in steps:
                on_step(events, finished)
                yield from pending
                pending.clear()
        finally:
            steps.close()

    # ---- scoring -------------------------------------------------------------------------------
    def score(self, context, continuations, *, use_tqdm=False):
        """The log-probability of each continuation's tokens given the context (text or ids).
        The context is prefilled once in the prefix tree; each continuation decodes with its own
        tokens forced, attending the context through the sharing tree. Continuation text is
        encoded without special tokens. Returns one ScoreOutput per continuation, in order."""
        _, ctx, _ = self._prompt(context, 0)
        conts = [self.encode(c, add_special_tokens=False) if isinstance(c, str) else self._ids(c, f"continuations[{i}]")
                 for i, c in enumerate(continuations)]
        greedy = _hydragen._SamplingParams()
        ids, results = [], [None] * len(conts)
        for i, cont in enumerate(conts):
            if not cont:
                results[i] = ScoreOutput(token_ids=[], token_logprobs=[], logprob=0.0)
                continue
            ids.append((self._engine.submit(ctx, 1, greedy, len(cont), [], [], [], cont), i))
        where, errors = dict(ids), []

        def on_step(_events, finished):
            for request, _sample, tokens, logprobs, _reason, error, _top in finished:
                i = where[request]
                if error:
                    errors.append(f"score: continuation {i}: {error}")
                results[i] = ScoreOutput(token_ids=list(tokens), token_logprobs=list(logprobs),
                                         logprob=float(sum(logprobs)))

        self._run([rid for rid, _ in ids], on_step, total=sum(map(len, conts)), use_tqdm=use_tqdm)
        if errors:
            raise ValueError("; ".join(errors))
        return results

    # ---- weights ---------------------------------------------------------------------------------
    def state_dict(self):
        """Copies of the weights by checkpoint name, as NumPy arrays (CPU) or torch tensors (CUDA)."""
        from ._arrays import as_output

        like = None
        if self.device == "cuda":
            import torch

            like = torch.empty(0)
        import numpy as np

        return {name: as_output(capsule, like if like is not None else np.empty(0))
                for name, capsule in self._engine.weights().items()}

    def load_weights(self, weights):
        """Replaces weights in place from a dict of checkpoint name -> array or tensor (names
        and shapes checked first: ValueError naming the tensor), then flushes the prefix
        cache, whose K/V the old weights computed."""
        from ._arrays import as_input

        self._engine.load_weights({str(k): as_input(v, str(k)) for k, v in dict(weights).items()})

    def reset_prefix_cache(self):
        """Drops every cached prompt's K/V (the engine's counters start again from zero)."""
        self._engine.reset_prefix_cache()

    def metrics(self):
        """The engine's counters since it was made or its cache last flushed, and its step timings."""
        return self._engine.metrics()
