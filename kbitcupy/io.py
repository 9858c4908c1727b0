"""Stored weights: KbitWeights (and plain tensors) in safetensors files.

File layout (a valid safetensors file; any safetensors reader opens it):

* a quantized weight ``NAME`` is three tensors: ``NAME.kbit_packed`` (U32),
  ``NAME.kbit_absmax`` (U8 E4M4 codes, or F32/F16 for the flat layout) and
  ``NAME.kbit_codebook`` (F32, 2^k levels);
* any other tensor (norms, embeddings, biases, the router) is stored as itself;
* the header metadata holds ``kbitcupy.format`` = "kbitcupy",
  ``kbitcupy.format_version`` and ``kbitcupy.weights``: JSON {NAME: {k, shape,
  layout, tensor_scale, dtype, absmax, crc32}}.  The crc32 covers packed, absmax and
  codebook bytes, so a flipped bit is caught on load (``verify=False`` skips it).

Writing streams tensor by tensor through a temporary file next to the output (memory
use is one tensor, disk use twice the output), then renames: a crash never leaves a
half-written file under the final name.
"""
from __future__ import annotations

import json
import os
import struct
import zlib
from typing import Dict, Iterable, Mapping, Optional

import numpy as np

from ._arrays import cuda_index, is_cupy, is_torch, _torch_cpu_to_numpy
from .reference import bfloat16
from .weight import FORMAT_VERSION, KbitWeight

FORMAT_NAME = "kbitcupy"
SUFFIXES = (".kbit_packed", ".kbit_absmax", ".kbit_codebook")
_META_FORMAT, _META_VERSION, _META_WEIGHTS = "kbitcupy.format", "kbitcupy.format_version", "kbitcupy.weights"

_ST_DTYPES = {"bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "uint16": "U16", "float16": "F16",
              "bfloat16": "BF16", "int32": "I32", "uint32": "U32", "float32": "F32", "float64": "F64",
              "int64": "I64", "uint64": "U64"}


class KbitFormatError(ValueError):
    """A file that is not a readable kbitcupy safetensors file (wrong version, corrupt, truncated)."""


# ----------------------------------------------------------------------------- helpers
def _host(a) -> np.ndarray:
    """Any array (NumPy, CuPy, torch) as a C-contiguous NumPy array."""
    if is_cupy(a):
        a = a.get()
    elif is_torch(a):
        a = _torch_cpu_to_numpy(a.detach().cpu())
    return np.ascontiguousarray(a)


def _dtype_name(dt) -> str:
    dt = np.dtype(dt)
    return "bfloat16" if bfloat16 is not None and dt == bfloat16 else dt.name


def _crc(*arrays) -> int:
    c = 0
    for a in arrays:
        c = zlib.crc32(np.ascontiguousarray(a).reshape(-1).view(np.uint8), c)
    return c


def _to_device(a: np.ndarray, dev: Optional[int]):
    if dev is None:
        return a
    import cupy as cp

    with cp.cuda.Device(dev):
        return cp.asarray(a)


# ----------------------------------------------------------------------------- writing
class SafetensorsWriter:
    """Write a safetensors file one tensor at a time (bounded memory).

    >>> with SafetensorsWriter("out.safetensors", metadata={"source": "x"}) as w:
    ...     w.add("layer.weight", qw)        # a KbitWeight
    ...     w.add("layer.bias", bias)        # any array
    """

    def __init__(self, path: str, metadata: Optional[Mapping[str, str]] = None):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        self.path = os.fspath(path)
        self.metadata = {str(k): str(v) for k, v in (metadata or {}).items()}
        self._tmp_path = self.path + ".kbit-data.tmp"
        self._tmp = open(self._tmp_path, "wb")
        self._entries: Dict[str, tuple] = {}  # name -> (dtype str, shape, tmp offset, nbytes, alignment)
        self._weights: Dict[str, dict] = {}
        self._pos = 0
        self._done = False

    def _add_array(self, name: str, a) -> None:
        if name in self._entries:
            raise ValueError(f"duplicate tensor name {name!r}")
        a = _host(a)
        dn = _dtype_name(a.dtype)
        if dn not in _ST_DTYPES:
            raise TypeError(f"{name}: dtype {dn} cannot be stored in safetensors")
        self._tmp.write(a.reshape(-1).view(np.uint8).data)  # raw bytes (bf16 has no buffer format)
        self._entries[name] = (_ST_DTYPES[dn], list(a.shape), self._pos, a.nbytes, a.dtype.itemsize)
        self._pos += a.nbytes

    def add(self, name: str, tensor) -> None:
        """Add a KbitWeight (stored as its three tensors plus metadata) or a plain array."""
        if self._done:
            raise ValueError("writer is closed")
        if not isinstance(name, str):
            raise TypeError(f"tensor names must be str, got {type(name).__name__}")
        if not isinstance(tensor, KbitWeight):
            self._add_array(name, tensor)
            return
        qw = tensor.validate()
        if name in self._weights:
            raise ValueError(f"duplicate weight name {name!r}")
        packed, absmax, cb = _host(qw.packed), _host(qw.absmax), _host(qw.codebook)
        for suf, a in zip(SUFFIXES, (packed, absmax, cb)):
            self._add_array(name + suf, a)
        self._weights[name] = {"k": qw.k, "shape": list(qw.shape), "layout": qw.layout,
                               "tensor_scale": float(qw.tensor_scale), "dtype": _dtype_name(qw.dtype),
                               "absmax": _dtype_name(absmax.dtype), "crc32": _crc(packed, absmax, cb)}

    def close(self) -> str:
        """Write header + data (largest alignment first, like safetensors) and rename into place."""
        if self._done:
            return self.path
        self._tmp.close()
        meta = dict(self.metadata)
        meta.update({_META_FORMAT: FORMAT_NAME, _META_VERSION: str(FORMAT_VERSION),
                     _META_WEIGHTS: json.dumps(self._weights, separators=(",", ":"))})
        order = sorted(self._entries, key=lambda n: (-self._entries[n][4], n))
        header, off = {"__metadata__": meta}, 0
        for n in order:
            dt, shape, _, nb, _ = self._entries[n]
            header[n] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + nb]}
            off += nb
        hb = json.dumps(header, separators=(",", ":")).encode()
        hb += b" " * (-len(hb) % 8)  # data starts 8-byte aligned
        part = self.path + ".partial"
        try:
            with open(part, "wb") as out, open(self._tmp_path, "rb") as src:
                out.write(struct.pack("<Q", len(hb)))
                out.write(hb)
                for n in order:
                    _, _, pos, nb, _ = self._entries[n]
                    src.seek(pos)
                    while nb:
                        chunk = src.read(min(nb, 64 << 20))
                        if not chunk:
                            raise IOError("temporary data file is shorter than expected")
                        out.write(chunk)
                        nb -= len(chunk)
            os.replace(part, self.path)
        finally:
            self._done = True
            for p in (self._tmp_path, part):
                if os.path.exists(p):
                    os.remove(p)
        return self.path

    def abort(self) -> None:
        if not self._done:
            self._tmp.close()
            os.remove(self._tmp_path)
            self._done = True

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()


def save(path: str, tensors: Mapping[str, object], metadata: Optional[Mapping[str, str]] = None) -> str:
    """Save {name: KbitWeight or array} (NumPy, CuPy or torch) to one safetensors file."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    if not isinstance(tensors, Mapping):
        raise TypeError(f"tensors must be a mapping of name -> KbitWeight or array, got {type(tensors).__name__}")
    with SafetensorsWriter(path, metadata) as w:
        for name, t in tensors.items():
            w.add(name, t)
    return os.fspath(path)


def save_weight(path: str, qw: KbitWeight, name: str = "weight", metadata=None) -> str:
    """Save a single KbitWeight."""
    if not isinstance(qw, KbitWeight):
        raise TypeError(f"qw must be a KbitWeight, got {type(qw).__name__}")
    return save(path, {name: qw}, metadata)


# ----------------------------------------------------------------------------- reading
class KbitFile:
    """Lazy reader: open once, load weights one by one (each straight to the device).

    >>> with KbitFile("model.safetensors") as f:
    ...     qw = f.get("model.layers.0.mlp.down_proj.weight", device="cuda")
    """

    def __init__(self, path: str, verify: bool = True):
        try:
            from safetensors import safe_open
        except ImportError as e:  # pragma: no cover
            raise ImportError("reading kbitcupy files needs safetensors: pip install safetensors") from e
        self.path, self.verify = os.fspath(path), verify
        if not os.path.isfile(self.path):
            raise FileNotFoundError(self.path)
        try:
            self._f = safe_open(self.path, framework="numpy")
            self._f.__enter__()
            meta = dict(self._f.metadata() or {})
        except Exception as e:  # safetensors raises its own SafetensorError for truncation/garbage
            raise KbitFormatError(f"{self.path}: not a readable safetensors file (corrupt or truncated?): {e}") from e
        try:
            self._check(meta)
        except Exception:
            self.close()  # no open handle left behind by a bad file
            raise

    def _check(self, meta: dict) -> None:
        if meta.get(_META_FORMAT) != FORMAT_NAME:
            raise KbitFormatError(f"{self.path}: not a kbitcupy file (no '{_META_FORMAT}' metadata); "
                                  "quantize a checkpoint with `python -m kbitcupy quantize IN OUT -k 4`")
        ver = meta.get(_META_VERSION)
        if ver != str(FORMAT_VERSION):
            raise KbitFormatError(f"{self.path}: kbitcupy format version {ver!r}, but this kbitcupy reads version "
                                  f"{FORMAT_VERSION}; re-quantize the checkpoint or use a matching kbitcupy")
        try:
            self.weights: Dict[str, dict] = json.loads(meta[_META_WEIGHTS])
            if not isinstance(self.weights, dict):
                raise ValueError("not a JSON object")
        except (KeyError, ValueError) as e:
            raise KbitFormatError(f"{self.path}: damaged '{_META_WEIGHTS}' metadata: {e}") from e
        self.metadata = {k: v for k, v in meta.items() if not k.startswith("kbitcupy.")}
        stored = set(self._f.keys())
        for name in self.weights:
            missing = [name + s for s in SUFFIXES if name + s not in stored]
            if missing:
                raise KbitFormatError(f"{self.path}: weight {name!r} is missing tensors {missing}")
        parts = {name + s for name in self.weights for s in SUFFIXES}
        self.tensors = sorted(stored - parts)  # the plain (not quantized) tensors

    def keys(self):
        """Quantized weight names, then plain tensor names."""
        return list(self.weights) + self.tensors

    def __contains__(self, name) -> bool:
        return name in self.weights or name in self.tensors

    def _tensor(self, name):
        try:
            return self._f.get_tensor(name)
        except Exception as e:
            raise KbitFormatError(f"{self.path}: cannot read tensor {name!r}: {e}") from e

    def get(self, name: str, device=None):
        """A KbitWeight (for a quantized name) or an array; device None/'cpu' -> NumPy, 'cuda[:N]' -> CuPy."""
        dev = cuda_index(device)
        if name not in self.weights:
            if name not in self.tensors:
                raise KeyError(f"{self.path}: no tensor or weight named {name!r}")
            return _to_device(self._tensor(name), dev)
        info = self.weights[name]
        packed, absmax, cb = (self._tensor(name + s) for s in SUFFIXES)
        if self.verify and _crc(packed, absmax, cb) != info.get("crc32"):
            raise KbitFormatError(f"{self.path}: weight {name!r} fails its crc32 check (the file is corrupt)")
        try:
            dtype = bfloat16 if info["dtype"] == "bfloat16" else np.dtype(info["dtype"])
            qw = KbitWeight(packed.reshape(-1).view(np.uint32), absmax.reshape(-1), cb.astype(np.float32),
                            int(info["k"]), tuple(int(s) for s in info["shape"]), info["layout"],
                            float(info["tensor_scale"]), dtype).validate()
        except (KeyError, TypeError, ValueError) as e:
            raise KbitFormatError(f"{self.path}: weight {name!r} is inconsistent with its metadata: {e}") from e
        return qw if dev is None else qw.cuda(dev)

    def close(self):
        if getattr(self, "_f", None) is not None:
            self._f.__exit__(None, None, None)
            self._f = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def load(path: str, device=None, names: Optional[Iterable[str]] = None, verify: bool = True) -> Dict[str, object]:
    """Load {name: KbitWeight or array} from a kbitcupy safetensors file.

    device None/'cpu': NumPy (the reference backend); 'cuda' or 'cuda:N': CuPy arrays on
    that GPU, loaded one tensor at a time.  ``names`` loads only those entries.
    Raises KbitFormatError for another format version, a corrupt or a truncated file.
    """
    cuda_index(device)  # a bad device fails before any reading
    with KbitFile(path, verify) as f:
        return {n: f.get(n, device) for n in (f.keys() if names is None else names)}


def load_weight(path: str, name: Optional[str] = None, device=None, verify: bool = True) -> KbitWeight:
    """Load one KbitWeight (the only one in the file when name is None)."""
    with KbitFile(path, verify) as f:
        if name is None:
            if len(f.weights) != 1:
                raise ValueError(f"{path} holds {len(f.weights)} weights; pass name= (one of {list(f.weights)[:5]}...)")
            name = next(iter(f.weights))
        if name not in f.weights:
            raise KeyError(f"{path}: no quantized weight named {name!r}")
        return f.get(name, device)


def read_metadata(path: str) -> Dict[str, str]:
    """The user metadata of a kbitcupy file (without kbitcupy's own keys)."""
    with KbitFile(path, verify=False) as f:
        return dict(f.metadata)
