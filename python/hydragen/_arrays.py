"""NumPy arrays and torch tensors in and out of the extension through DLPack (no copies)."""
import numpy as np

_CPU, _CUDA = 1, 2


def framework(x):
    """'torch' for a torch tensor, else 'numpy'."""
    return "torch" if type(x).__module__.startswith("torch") else "numpy"


def as_input(x, name):
    """x as something the extension can view: arrays and tensors as they are; a read-only NumPy
    array (which NumPy will not export) or a nested list as a NumPy copy."""
    if isinstance(x, np.ndarray):
        return x if x.flags.writeable else x.copy()
    if hasattr(x, "__dlpack__"):
        return x
    try:
        return np.array(x, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: expected a NumPy array or a torch tensor, got {type(x).__name__}") from e


class _Capsule:
    """A DLPack capsule made importable by np.from_dlpack (which wants __dlpack__ methods)."""

    def __init__(self, capsule, device):
        self._capsule, self._device = capsule, device

    def __dlpack__(self, stream=None, **_kwargs):  # NumPy 2 may ask for max_version: the legacy capsule still serves
        return self._capsule

    def __dlpack_device__(self):
        return self._device


def as_output(capsule, like):
    """A result capsule as an array of like's framework (torch tensor or NumPy array)."""
    if framework(like) == "torch":
        import torch.utils.dlpack

        return torch.utils.dlpack.from_dlpack(capsule)
    return np.from_dlpack(_Capsule(capsule, (_CPU, 0)))
