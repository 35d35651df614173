"""SamplingParams: vLLM's names and defaults where they mean the same."""
import os
from dataclasses import dataclass, field
from typing import List, Optional, Union

from . import _hydragen


@dataclass
class SamplingParams:
    """How each prompt's samples are drawn. temperature 0 is greedy; top_k 0 or -1 is off;
    seed None draws a fresh seed per request (sample i of a request uses seed + i); stop ends a
    sample at any of these strings (the text is cut before it); logprobs not None returns each
    sampled token's log-probability and its top-`logprobs` alternatives
    (at most 20); ignore_eos keeps going past the model's EOS tokens."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: Optional[int] = None
    max_tokens: int = 16
    stop: Union[None, str, List[str]] = None
    stop_token_ids: List[int] = field(default_factory=list)
    logprobs: Optional[int] = None
    ignore_eos: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0

    def stop_strings(self):
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def _native(self):
        """The C++ sampler's parameters, validated (ValueError naming the field)."""
        for name in ("n", "max_tokens", "top_k"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"SamplingParams: {name} must be an integer, got {value!r}")
        if self.n < 1:
            raise ValueError(f"SamplingParams: n must be >= 1, got {self.n}")
        if self.max_tokens < 1:
            raise ValueError(f"SamplingParams: max_tokens must be >= 1, got {self.max_tokens}")
        p = _hydragen._SamplingParams()
        p.temperature = float(self.temperature)
        p.top_p = float(self.top_p)
        p.top_k = 0 if self.top_k == -1 else self.top_k
        p.min_p = float(self.min_p)
        seed = self.seed if self.seed is not None else int.from_bytes(os.urandom(8), "little") >> 1
        if not 0 <= int(seed) < 2**64:
            raise ValueError(f"SamplingParams: seed must be in [0, 2^64), got {seed}")
        p.seed = int(seed)
        p.presence_penalty = float(self.presence_penalty)
        p.frequency_penalty = float(self.frequency_penalty)
        p.repetition_penalty = float(self.repetition_penalty)
        if self.logprobs is not None and (isinstance(self.logprobs, bool) or not isinstance(self.logprobs, int)):
            raise ValueError(f"SamplingParams: logprobs must be None or an integer, got {self.logprobs!r}")
        p.logprobs = self.logprobs or 0  # the top-N; the sampled token's own logprob comes always
        p.validate()
        return p
