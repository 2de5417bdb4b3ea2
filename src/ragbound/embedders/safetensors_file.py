"""Read a ``.safetensors`` file into numpy arrays without the safetensors package (or torch).

The format: an 8-byte little-endian header length, a JSON header naming each tensor's dtype,
shape and byte range, then the raw little-endian tensors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ragbound.errors import InputError

_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "I32": "<i4"}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of ``path`` (float tensors as float32), by name."""
    data = np.memmap(path, dtype=np.uint8, mode="r")
    length = int.from_bytes(data[:8].tobytes(), "little")
    if length <= 0 or 8 + length > len(data):
        raise InputError(f"{path} is not a safetensors file (header length {length})")
    header = json.loads(data[8 : 8 + length].tobytes())
    body = data[8 + length :]
    return {
        name: _tensor(body, meta, path, name)
        for name, meta in header.items()
        if name != "__metadata__"
    }


def _tensor(body: np.ndarray, meta: dict, path: Path, name: str) -> np.ndarray:
    dtype = _DTYPES.get(meta["dtype"])
    if dtype is None:
        raise InputError(f"{path}: tensor {name} has dtype {meta['dtype']}, not read here")
    start, end = meta["data_offsets"]
    values = np.frombuffer(body[start:end].tobytes(), dtype=dtype).reshape(meta["shape"])
    return values.astype(np.float32) if values.dtype.kind == "f" else values.astype(np.int64)
