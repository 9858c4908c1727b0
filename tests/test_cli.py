"""Command line (CPU): argument errors, the quantize command on a small checkpoint, info, demo, bench."""
import os
import subprocess
import sys
import types

import numpy as np
import pytest

import kbitcupy as kb
from kbitcupy import cli
from kbitcupy.__main__ import main
from kbitcupy.reference import bfloat16

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(*args):
    return subprocess.run([sys.executable, "-m", "kbitcupy", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT}, timeout=300)


@pytest.mark.parametrize("argv, msg", [
    ([], "required"),
    (["frobnicate"], "invalid choice"),
    (["quantize"], "required"),
    (["quantize", "a.safetensors"], "required"),
    (["quantize", "a", "b", "-k", "6"], "invalid choice"),
    (["quantize", "a", "b", "-k", "four"], "invalid int"),
    (["quantize", "a", "b", "--device", "tpu"], "invalid choice"),
    (["demo", "-k", "1"], "invalid choice"),
    (["demo", "--batch", "0"], "positive"),
    (["compile", "--bogus"], "unrecognized"),
])
def test_argument_errors(argv, msg, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert msg in capsys.readouterr().err


def test_help_and_module_entry():
    r = _run("--help")
    assert r.returncode == 0 and "quantize" in r.stdout and "demo" in r.stdout
    r = _run("quantize", "--help")
    assert r.returncode == 0 and "--include" in r.stdout


# ----------------------------------------------------------------------------- quantize
@pytest.fixture
def checkpoint(tmp_path, rng):
    """A ~3 MB Qwen3-MoE-like checkpoint: bf16 weights, norms, embeddings, router, odd shapes."""
    from safetensors.numpy import save_file

    H, I, E = 512, 128, 4
    w = lambda *s: (rng.standard_normal(s) * 0.02).astype(bfloat16)  # noqa: E731
    t = {"model.embed_tokens.weight": w(512, H), "lm_head.weight": w(512, H),
         "model.norm.weight": np.ones(H, bfloat16), "model.layers.0.input_layernorm.weight": np.ones(H, bfloat16),
         "model.layers.0.self_attn.q_proj.weight": w(1024, H), "model.layers.0.self_attn.k_proj.weight": w(128, H),
         "model.layers.0.self_attn.o_proj.weight": w(H, 1024), "model.layers.0.mlp.gate.weight": w(E, H),
         "model.layers.0.self_attn.q_proj.bias": w(1024), "odd.weight": w(16, 40),
         "f32.weight": (rng.standard_normal((64, 64)) * 0.02).astype(np.float32),
         "int.table": np.arange(12, dtype=np.int64).reshape(3, 4)}
    for e in range(E):
        for n, s in (("gate", (I, H)), ("up", (I, H)), ("down", (H, I))):
            t[f"model.layers.0.mlp.experts.{e}.{n}_proj.weight"] = w(*s)
    p = str(tmp_path / "in.safetensors")
    save_file(t, p, metadata={"format": "pt"})
    assert 1e6 < os.path.getsize(p) < 8e6
    return p, t


QUANTIZED = {"q_proj.weight", "k_proj.weight", "o_proj.weight", "f32.weight"}


def test_quantize_command(checkpoint, tmp_path, capsys):
    from kbitcupy import io as kio

    inp, t = checkpoint
    out = str(tmp_path / "out.safetensors")
    assert main(["quantize", inp, out, "-k", "3", "--device", "cpu"]) == 0
    text = capsys.readouterr()
    assert "mean SQNR" in text.out and "->" in text.out and "24/24" in text.err  # summary + progress
    got = kio.load(out)
    assert set(got) == set(t)
    for name, a in t.items():
        q = isinstance(got[name], kb.KbitWeight)
        assert q == (any(name.endswith(s) for s in QUANTIZED) or ".experts." in name), name
        if q:  # the same codes as quantizing the tensor directly
            ref = kb.quantize(a, 3)
            assert got[name].packed.tobytes() == ref.packed.tobytes()
            assert got[name].absmax.tobytes() == ref.absmax.tobytes() and got[name].dtype == a.dtype
        else:  # kept tensors unchanged, bit for bit
            assert got[name].dtype == a.dtype and got[name].tobytes() == a.tobytes()
    meta = kio.read_metadata(out)
    assert meta["format"] == "pt" and meta["kbitcupy_k"] == "3" and meta["kbitcupy_source"] == "in.safetensors"


def test_quantize_summary_and_rules(checkpoint, tmp_path):
    inp, t = checkpoint
    out = str(tmp_path / "out.safetensors")
    logs = []
    s = cli.quantize_checkpoint(inp, out, 4, skip=[r"k_proj"], include=[r"lm_head"], device="cpu", progress=False,
                                log=logs.append)
    assert s["quantized"] == 4 + 12  # q, o, f32, lm_head (included) + 12 experts; k_proj skipped
    assert s["kept"] == {"skip rule": 3, "not a 2-D float weight": 4, "K not a multiple of 32": 1}
    assert "model.layers.0.self_attn.k_proj.weight" not in s["sqnr"] and "lm_head.weight" in s["sqnr"]
    assert 18 < s["mean_sqnr_db"] < 24  # 4-bit normal-float on Gaussian weights
    assert s["bytes_in"] == sum(a.nbytes for a in t.values()) and s["bytes_out"] < s["bytes_in"] / 2
    s2 = cli.quantize_checkpoint(inp, out, 4, default_skip=False, device="cpu", progress=False, log=logs.append)
    assert s2["quantized"] == 24 - 5 and "model.embed_tokens.weight" in s2["sqnr"]


def test_quantize_errors(checkpoint, tmp_path, capsys):
    inp, _ = checkpoint
    assert main(["quantize", str(tmp_path / "missing.safetensors"), str(tmp_path / "o.safetensors")]) == 1
    assert "no such file" in capsys.readouterr().err
    assert main(["quantize", inp, inp]) == 1
    assert "different file" in capsys.readouterr().err
    assert main(["quantize", inp, str(tmp_path / "no" / "o.safetensors")]) == 1
    assert "folder does not exist" in capsys.readouterr().err
    assert main(["quantize", inp, str(tmp_path / "o.safetensors"), "--skip", "("]) == 1
    assert "regular expression" in capsys.readouterr().err
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x00" * 100)
    assert main(["quantize", str(junk), str(tmp_path / "o.safetensors")]) == 1
    assert "not a readable safetensors" in capsys.readouterr().err
    assert not (tmp_path / "o.safetensors").exists()


def test_quantize_device_cuda_without_gpu(checkpoint, tmp_path, capsys):
    if cli.gpu_status()[0]:
        pytest.skip("a GPU is present")
    assert main(["quantize", checkpoint[0], str(tmp_path / "o.safetensors"), "--device", "cuda"]) == 1
    assert "no usable GPU" in capsys.readouterr().err


# ----------------------------------------------------------------------------- other commands
def test_info(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    for s in ("kbitcupy", "GPU:", "kernel families", "quant", "CuPy kernel cache", "dispatch:"):
        assert s in out


def test_demo_cpu_slice(capsys):
    rows = cli.run_demo(ks=(2, 4), batches=(1, 3), force_cpu=True, log=lambda *a: None)
    assert [(r["k"], r["batch"]) for r in rows] == [(2, 1), (2, 3), (4, 1), (4, 3)]
    err = {r["k"]: r["err"] for r in rows}
    assert 0.02 < err[4] < 0.15 and err[2] > 2 * err[4]  # more bits, less error
    assert all(abs(r["err"] - r["err_sep"]) < 1e-3 for r in rows if "err_sep" in r)
    assert sum("err_sep" in r for r in rows) == 2
    assert main(["demo", "--cpu", "-k", "5", "--batch", "2"]) == 0
    out = capsys.readouterr().out
    assert "no GPU" in out or "--cpu" in out
    assert "err %" in out


def test_bench_forwards_arguments(monkeypatch):
    seen = []
    fake = types.ModuleType("kbitcupy.bench")
    fake.main = lambda argv: seen.append(list(argv)) or 0
    monkeypatch.setitem(sys.modules, "kbitcupy.bench", fake)
    monkeypatch.setattr(kb, "bench", fake, raising=False)
    assert main(["bench", "--help", "-M", "1", "4"]) == 0
    assert seen == [["--help", "-M", "1", "4"]]


def test_progress_bar_plain(capsys):
    p = cli.Progress(20)
    for i in range(1, 21):
        p.update(i, f"t{i}")
    err = capsys.readouterr().err
    assert "20/20" in err and "[" in err and len(err.splitlines()) <= 11  # ~a line per 10 % when not a tty


def test_compile_offline_and_errors(capsys):
    assert main(["compile", "--family", "nope"]) == 1
    assert "unknown kernel families" in capsys.readouterr().err
    try:
        from kbitcupy._compile import _nvrtc

        _nvrtc().getVersion()
    except Exception:
        pytest.skip("no NVRTC")
    assert main(["compile", "--family", "quant", "--arch", "sm_90", "-q"]) == 0
    out = capsys.readouterr().out
    assert "compiling offline" in out and "kbit_quantize<" in out


def test_bench_without_gpu_says_so(monkeypatch, capsys):
    """No GPU: bench stops with one line naming why (its --help still works), before any timing."""
    seen = []
    fake = types.ModuleType("kbitcupy.bench")
    fake.main = lambda argv: seen.append(list(argv)) or 0
    monkeypatch.setitem(sys.modules, "kbitcupy.bench", fake)
    monkeypatch.setattr(kb, "bench", fake, raising=False)
    monkeypatch.setattr(cli, "gpu_status", lambda: (False, "no CUDA device"))
    assert main(["bench", "--M", "1"]) == 1
    assert "needs a CUDA GPU (no CUDA device)" in capsys.readouterr().err and seen == []
    monkeypatch.setattr(cli, "gpu_status", lambda: (True, "a GPU"))
    assert main(["bench", "--M", "1"]) == 0 and seen == [["--M", "1"]]
