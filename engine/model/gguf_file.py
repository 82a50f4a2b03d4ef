"""Read a GGUF file's metadata and tensor table (GGUF v2/v3, little-endian), the tensors as views of a memory map.

The `gguf` package's GGUFReader builds a numpy memmap view per field part: a vocabulary of 128k tokens and 280k
merges (Llama 3) costs it about a minute. Reading the same layout with struct from one mmap takes well under a
second. Layout (gguf-py/gguf/constants.py, ggml/include/gguf.h): magic "GGUF", version u32, tensor count u64, KV count
u64; each KV a string key, a u32 value type and the value; then each tensor's name, u32 n_dims, n_dims u64 dims
(ne0 first), u32 type and u64 offset into the data section, which starts at the next multiple of
general.alignment (default 32).
"""
from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_DTYPES = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
           7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class GgufTensor:
    name: str
    shape: tuple[int, ...]  # GGUF order: ne0 (a matrix's input features) first
    tensor_type: GGMLQuantizationType
    data: np.ndarray  # F32 / F16: values [*reversed(shape)]; other types: bytes [*reversed(shape[1:]), row bytes]

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape))


class GgufFile:
    """metadata: {key: value} (strings decoded, arrays as lists); tensors: in file order."""

    def __init__(self, path: str | Path) -> None:
        with open(path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        buf = self._map
        if buf[:4] != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version} is not supported (2 and 3 are; a big-endian file reads as "
                             "another number)")
        self._off = 24
        self.metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = self._string()
            self.metadata[key] = self._value(self._u32())
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            dims = struct.unpack_from(f"<{self._u32()}Q", buf, self._off)
            self._off += 8 * len(dims)
            kind = GGMLQuantizationType(self._u32())
            infos.append((name, tuple(int(d) for d in dims), kind, self._u64()))
        align = int(self.metadata.get("general.alignment", 32))
        start = -(-self._off // align) * align
        self.tensors = [self._tensor(start, *info) for info in infos]

    def _tensor(self, start: int, name: str, dims: tuple[int, ...], kind: GGMLQuantizationType,
                offset: int) -> GgufTensor:
        shape = tuple(reversed(dims))
        if kind in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            dtype = np.float32 if kind == GGMLQuantizationType.F32 else np.float16
            count = int(np.prod(dims))
            data = np.frombuffer(self._map, dtype=dtype, count=count, offset=start + offset).reshape(shape)
        else:
            block, size = GGML_QUANT_SIZES[kind]
            if dims[0] % block:
                raise ValueError(f"GGUF tensor {name!r}: {dims[0]} values per row is not a multiple of {block}")
            row = dims[0] // block * size
            count = row * int(np.prod(dims[1:]))
            data = np.frombuffer(self._map, dtype=np.uint8, count=count, offset=start + offset)
            data = data.reshape((*shape[:-1], row))
        return GgufTensor(name, dims, kind, data)

    def _u32(self) -> int:
        self._off += 4
        return int(struct.unpack_from("<I", self._map, self._off - 4)[0])

    def _u64(self) -> int:
        self._off += 8
        return int(struct.unpack_from("<Q", self._map, self._off - 8)[0])

    def _string(self) -> str:
        n = self._u64()
        self._off += n
        return bytes(self._map[self._off - n:self._off]).decode("utf-8")

    def _value(self, kind: int) -> Any:
        if kind == _STRING:
            return self._string()
        if kind == _ARRAY:
            item, count = self._u32(), self._u64()
            if item == _STRING:
                return [self._string() for _ in range(count)]
            if item == _ARRAY:
                return [self._value(_ARRAY) for _ in range(count)]
            values: np.ndarray = np.frombuffer(self._map, dtype=_DTYPES[item], count=count, offset=self._off)
            self._off += values.nbytes
            return values.tolist()
        fmt = _SCALARS[kind]
        self._off += struct.calcsize(fmt)
        return struct.unpack_from(fmt, self._map, self._off - struct.calcsize(fmt))[0]
