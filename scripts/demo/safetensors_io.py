"""The safetensors format, written and read without the safetensors package: an 8-byte
little-endian header length, a JSON header {name: {dtype, shape, data_offsets}} padded with
spaces to a multiple of 8 bytes, then the tensors' raw little-endian bytes in header order."""
import json
import struct

import numpy as np
import torch

_DTYPES = {torch.float32: ("F32", np.float32), torch.bfloat16: ("BF16", np.int16),
           torch.float16: ("F16", np.float16)}
_BY_NAME = {name: (torch_dtype, np_dtype) for torch_dtype, (name, np_dtype) in _DTYPES.items()}


def _raw_bytes(tensor):
    name, np_dtype = _DTYPES[tensor.dtype]
    t = tensor.detach().contiguous().cpu()
    if tensor.dtype == torch.bfloat16:
        t = t.view(torch.int16)  # numpy has no bfloat16: move the bits as int16
    return t.numpy().astype(np.dtype(np_dtype).newbyteorder("<"), copy=False).tobytes()


def save(tensors, path, metadata=None):
    """tensors: {name: torch tensor of float32, bfloat16 or float16}; names in sorted order."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        data = _raw_bytes(tensors[name])
        header[name] = {"dtype": _DTYPES[tensors[name].dtype][0], "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)


def load(path):
    """{name: torch tensor} in the file's dtypes."""
    blob = open(path, "rb").read()
    (length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + length])
    header.pop("__metadata__", None)
    base = 8 + length
    tensors = {}
    for name, entry in header.items():
        torch_dtype, np_dtype = _BY_NAME[entry["dtype"]]
        begin, end = entry["data_offsets"]
        array = np.frombuffer(blob[base + begin:base + end], dtype=np.dtype(np_dtype).newbyteorder("<"))
        t = torch.from_numpy(array.astype(np_dtype).copy()).reshape(entry["shape"])
        tensors[name] = t.view(torch.bfloat16) if torch_dtype == torch.bfloat16 else t
    return tensors
