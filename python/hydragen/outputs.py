"""What generate and score return, in the shape of vLLM's RequestOutput / CompletionOutput."""
from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass
class CompletionOutput:
    index: int  # the sample's number within its request
    text: str  # decoded (empty without a tokenizer), cut before a stop string
    token_ids: List[int]
    cumulative_logprob: float
    # With SamplingParams.logprobs = N: per token, {token id: log-probability} of the sampled
    # token and the N most likely ones (vLLM's shape, without its Logprob objects).
    logprobs: Optional[List[Dict[int, float]]]
    finish_reason: Optional[str]  # "stop", "length", "cancelled" or "error"
    error: str = ""  # why a malformed request failed

    def finished(self):
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    request_id: int
    prompt: Optional[str]
    prompt_token_ids: List[int]
    outputs: List[CompletionOutput] = field(default_factory=list)
    finished: bool = False


@dataclass
class ScoreOutput:
    """A continuation's log-probability given the context: logprob = sum(token_logprobs)."""

    token_ids: List[int]
    token_logprobs: List[float]
    logprob: float
