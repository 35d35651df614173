"""hydragen: exact shared-prefix (Hydragen) attention and an LLM engine, from Python.

    from hydragen import LLM, SamplingParams
    llm = LLM(model="models/demo", device="cpu")
    outs = llm.generate(["In the beginning"] * 4, SamplingParams(n=2, temperature=0.8, max_tokens=32))
"""
import os as _os

# The model presets (random_weights=...) shipped in the package, unless HYDRAGEN_PRESET_DIR says otherwise.
_presets = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "presets")
if _os.path.isdir(_presets):
    _os.environ.setdefault("HYDRAGEN_PRESET_DIR", _presets)

from . import ops  # noqa: E402
from .llm import LLM  # noqa: E402
from .outputs import CompletionOutput, RequestOutput, ScoreOutput  # noqa: E402
from .sampling_params import SamplingParams  # noqa: E402

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "ScoreOutput", "ops"]
