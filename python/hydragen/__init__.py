"""hydragen: exact shared-prefix (Hydragen) attention and an LLM engine, from Python.

    from hydragen import LLM, SamplingParams
    llm = LLM(model="models/demo", device="cpu")
    outs = llm.generate(["In the beginning"] * 4, SamplingParams(n=2, temperature=0.8, max_tokens=32))
"""
from . import ops
from .llm import LLM
from .outputs import CompletionOutput, RequestOutput, ScoreOutput
from .sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "ScoreOutput", "ops"]
