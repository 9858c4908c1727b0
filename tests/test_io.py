"""Stored weights (kbitcupy.io): bit-exact round trips, and clear errors for bad files."""
import json
import os
import struct

import numpy as np
import pytest

pytest.importorskip("safetensors")

import kbitcupy as kb  # noqa: E402
from kbitcupy import io as kio  # noqa: E402
from kbitcupy.reference import bfloat16  # noqa: E402


def _same(a: kb.KbitWeight, b: kb.KbitWeight):
    assert (a.k, a.shape, a.layout, a.tensor_scale, np.dtype(a.dtype)) == \
        (b.k, b.shape, b.layout, b.tensor_scale, np.dtype(b.dtype))
    for n in ("packed", "absmax", "codebook"):
        x, y = getattr(a, n), getattr(b, n)
        x, y = (v.get() if hasattr(v, "get") else v for v in (x, y))
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), n


def _weights(rng):
    ws = {}
    for k in (2, 3, 4, 5):
        W = (rng.standard_normal((96 + 32 * k, 64 * k)) * 0.02).astype(np.float16)
        ws[f"tiled.k{k}"] = kb.quantize(W, k)
    W = (rng.standard_normal((40, 96)) * 0.02).astype(bfloat16)
    ws["flat.e4m4.bf16"] = kb.quantize(W, 3, layout="flat")
    ws["flat.f32"] = kb.quantize(W.astype(np.float32), 4, layout="flat", absmax_format="float32")
    ws["big.scale"] = kb.quantize((rng.standard_normal((128, 64)) * 300).astype(np.float32), 4)  # tensor_scale != 1
    return ws


@pytest.fixture
def stored(tmp_path, rng):
    ws = _weights(rng)
    plain = {"norm.weight": np.ones(64, bfloat16), "bias": rng.standard_normal(7).astype(np.float32),
             "ids": np.arange(5, dtype=np.int64), "odd": rng.standard_normal((3, 5)).astype(np.float16)}
    path = str(tmp_path / "w.safetensors")
    kio.save(path, {**ws, **plain}, metadata={"note": "hello"})
    return path, ws, plain


def test_round_trip_bit_exact(stored):
    path, ws, plain = stored
    assert ws["big.scale"].tensor_scale != 1.0
    got = kio.load(path)
    assert set(got) == set(ws) | set(plain)
    for n, qw in ws.items():
        _same(got[n], qw)
        assert np.array_equal(kb.dequantize(got[n], np.float32), kb.dequantize(qw, np.float32))
    for n, a in plain.items():
        assert got[n].dtype == a.dtype and got[n].shape == a.shape and got[n].tobytes() == a.tobytes()
    assert kio.read_metadata(path) == {"note": "hello"}


def test_single_weight_and_subsets(tmp_path, rng):
    qw = kb.quantize((rng.standard_normal((64, 128)) * 0.02).astype(np.float16), 4)
    p = str(tmp_path / "one.safetensors")
    kio.save_weight(p, qw)
    _same(kio.load_weight(p), qw)
    _same(kio.load(p, names=["weight"])["weight"], qw)
    with kio.KbitFile(p) as f:
        assert f.keys() == ["weight"] and "weight" in f and f.tensors == []
        with pytest.raises(KeyError):
            f.get("nope")


def test_official_reader_and_alignment(stored):
    from safetensors import safe_open

    path, ws, _ = stored
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(n))
    assert (8 + n) % 8 == 0
    sizes = {"U32": 4, "F32": 4, "I64": 8, "F16": 2, "BF16": 2, "U8": 1}
    for name, e in header.items():
        if name != "__metadata__":
            assert e["data_offsets"][0] % sizes[e["dtype"]] == 0, name  # every tensor naturally aligned
    with safe_open(path, framework="numpy") as f:
        assert f.get_tensor("tiled.k3.kbit_packed").tobytes() == ws["tiled.k3"].packed.tobytes()


def test_writer_streams_and_aborts(tmp_path, rng):
    p = str(tmp_path / "s.safetensors")
    with pytest.raises(RuntimeError):
        with kio.SafetensorsWriter(p) as w:
            w.add("a", np.zeros(4, np.float32))
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []  # no partial output, no temporary file left
    with kio.SafetensorsWriter(p) as w:
        w.add("a", np.zeros(4, np.float32))
        with pytest.raises(ValueError, match="duplicate"):
            w.add("a", np.zeros(4, np.float32))
    assert os.listdir(tmp_path) == ["s.safetensors"]


def test_not_kbit_and_wrong_version(tmp_path, stored):
    from safetensors.numpy import save_file
    from safetensors import safe_open

    p = str(tmp_path / "plain.safetensors")
    save_file({"x": np.zeros(3, np.float32)}, p)
    with pytest.raises(kio.KbitFormatError, match="not a kbitcupy file"):
        kio.load(p)
    path, _, _ = stored
    with safe_open(path, framework="numpy") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        meta = dict(f.metadata())
    meta["kbitcupy.format_version"] = "999"
    p2 = str(tmp_path / "v999.safetensors")
    save_file(tensors, p2, metadata=meta)
    with pytest.raises(kio.KbitFormatError, match="version '999'.*reads version 1"):
        kio.load(p2)
    del tensors["tiled.k2.kbit_absmax"]
    meta["kbitcupy.format_version"] = "1"
    save_file(tensors, p2, metadata=meta)
    with pytest.raises(kio.KbitFormatError, match="missing tensors"):
        kio.load(p2)


@pytest.mark.parametrize("frac", [0.0, 0.001, 0.5, 0.99])
def test_truncated(stored, tmp_path, frac):
    path, _, _ = stored
    data = open(path, "rb").read()
    cut = str(tmp_path / "cut.safetensors")
    with open(cut, "wb") as f:
        f.write(data[:int(len(data) * frac)] if frac else data[:-1])
    with pytest.raises(kio.KbitFormatError, match="corrupt or truncated"):
        kio.load(cut)


def test_corrupt_data_caught_by_crc(stored, tmp_path):
    path, ws, _ = stored
    data = bytearray(open(path, "rb").read())
    n = struct.unpack("<Q", data[:8])[0]
    e = json.loads(data[8:8 + n])["tiled.k4.kbit_packed"]
    data[8 + n + e["data_offsets"][0] + 5] ^= 0x10  # one flipped bit inside the packed words
    bad = str(tmp_path / "bad.safetensors")
    open(bad, "wb").write(bytes(data))
    with pytest.raises(kio.KbitFormatError, match="tiled.k4.*crc32"):
        kio.load(bad)
    got = kio.load(bad, names=["tiled.k3"])  # other weights still load
    _same(got["tiled.k3"], ws["tiled.k3"])
    assert kio.load(bad, verify=False)["tiled.k4"].packed.tobytes() != ws["tiled.k4"].packed.tobytes()


def test_corrupt_header(stored, tmp_path):
    path, _, _ = stored
    data = bytearray(open(path, "rb").read())
    data[8:9] = b"#"  # header JSON no longer parses
    bad = str(tmp_path / "bad.safetensors")
    open(bad, "wb").write(bytes(data))
    with pytest.raises(kio.KbitFormatError):
        kio.load(bad)
    with pytest.raises(FileNotFoundError):
        kio.load(str(tmp_path / "missing.safetensors"))


def test_inconsistent_metadata(stored, tmp_path):
    from safetensors import safe_open
    from safetensors.numpy import save_file

    path, _, _ = stored
    with safe_open(path, framework="numpy") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        meta = dict(f.metadata())
    w = json.loads(meta["kbitcupy.weights"])
    w["tiled.k2"]["shape"] = [64, 64]  # sizes no longer match the packed words
    meta["kbitcupy.weights"] = json.dumps(w)
    p = str(tmp_path / "m.safetensors")
    save_file(tensors, p, metadata=meta)
    with pytest.raises(kio.KbitFormatError, match="inconsistent"):
        kio.load(p, names=["tiled.k2"])


def test_save_rejects_bad_input(tmp_path):
    with pytest.raises(TypeError):
        kio.save_weight(str(tmp_path / "x.safetensors"), np.zeros(3))
    with pytest.raises(ValueError, match="device"):
        kio.load(str(tmp_path / "x.safetensors"), device="tpu")


def test_save_bad_arguments(tmp_path, rng):
    """Arguments in the wrong order, or a name that is not a string, are named in the error;
    no file (or temporary) is left behind."""
    q = kb.quantize(rng.standard_normal((64, 64)).astype(np.float32), 4)
    p = str(tmp_path / "w.safetensors")
    with pytest.raises(TypeError, match="tensors must be a mapping"):
        kio.save(p, [q])
    with pytest.raises(TypeError, match="path must be a str or os.PathLike"):
        kio.save({"w": q}, p)
    with pytest.raises(TypeError, match="tensor names must be str"):
        kio.save(p, {3: q})
    assert os.listdir(tmp_path) == []
