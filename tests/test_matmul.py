"""CPU tests of kbitcupy.matmul's kernel runner (_run_kind): each kind's fallbacks, with the
kernels replaced by recorders (the GPU tests run the real ones)."""
import importlib
from types import SimpleNamespace

import numpy as np
import pytest

mm = importlib.import_module("kbitcupy.matmul")  # the module (the package exports the function)


@pytest.fixture
def ran(monkeypatch):
    """The kernels matmul._run_kind may launch, recording which one ran; knobs for the
    conditions its fallbacks test (GEMV fits, sm_90, wgmma fits)."""
    log, env = [], dict(fits=True, sm90=True, wg_fits=True)

    def rec(name):
        return lambda A, qw, out, validate=True: log.append(name)

    def wgmma(A, qw, out, validate=True):
        if not env["wg_fits"]:
            raise mm.WG.DoesNotFit("too big")
        log.append("wgmma")

    monkeypatch.setattr(mm, "fits", lambda N, K, M, k, dev, tiled=True: env["fits"])
    monkeypatch.setattr(mm, "gemv", rec("gemv"))
    monkeypatch.setattr(mm.ST, "gemv_stream", rec("stream"))
    monkeypatch.setattr(mm.ST, "supported", lambda dev: env["sm90"])
    monkeypatch.setattr(mm.WG, "supported", lambda dev: env["sm90"])
    monkeypatch.setattr(mm.WG, "wgmma_gemm", wgmma)
    monkeypatch.setattr(mm, "gemm", rec("gemm"))
    monkeypatch.setattr(mm, "dequant_matmul", rec("dq"))
    return log, env


def _call(kind, M, layout="tiled"):
    A = SimpleNamespace(shape=(M, 2048), data=SimpleNamespace(device_id=0))
    qw = SimpleNamespace(shape=(1024, 2048), k=4, layout=layout)
    return mm._run_kind(kind, A, qw, None)


def test_run_kind_and_fallbacks(ran):
    log, env = ran
    for kind in ("gemv", "stream", "wgmma", "gemm", "dq"):
        assert _call(kind, 8) == kind
    assert log == ["gemv", "stream", "wgmma", "gemm", "dq"]
    assert _call("stream", mm.ST.MAX_M + 1) == "wgmma"  # past the streaming GEMV's M
    env["fits"] = False  # the GEMV's plan does not fit: the streaming GEMV (then wgmma, kbit_gemm), or dq for a flat weight
    assert _call("gemv", 4) == "stream" and _call("gemv", 4, "flat") == "dq" and _call("gemv", mm.ST.MAX_M + 1) == "wgmma"
    env["wg_fits"] = False
    assert _call("wgmma", 64) == "gemm" and _call("stream", mm.ST.MAX_M + 1) == "gemm"
    env["sm90"] = False  # no sm_90: neither the streaming GEMV nor wgmma
    assert _call("stream", 16) == "gemm" and _call("wgmma", 16) == "gemm" and _call("gemv", 16) == "gemm"


def test_dispatch_flat_weights(ran):
    """A flat weight: the GEMV up to its M where it has an instantiation (E4M4 or float32 absmax), else dequantize --
    float16 absmax (an interop format from_packed accepts) had none and failed inside the GEMV's launch."""
    log, _ = ran
    A = SimpleNamespace(shape=(4, 2048), data=SimpleNamespace(device_id=0))
    for adt, want in (("float32", "gemv"), ("uint8", "gemv"), ("float16", "dq")):
        qw = SimpleNamespace(shape=(1024, 2048), k=4, layout="flat", absmax=SimpleNamespace(dtype=np.dtype(adt)))
        assert mm._dispatch_gpu(A, qw, None) == want, adt
    A.shape = (mm.GEMV_MAX_M + 1, 2048)
    assert mm._dispatch_gpu(A, qw, None) == "dq"
    assert log == ["gemv", "gemv", "dq", "dq"]


def test_wgmma_choose_tok():
    """TOK: the smallest choice covering M; beyond the largest, 128 or 192 by waves x TOK x K
    tiles per split, which picks the faster one in every cell H100 measured (run18_big2's
    tok_probe: gate/up, down, Q, O at M = 256 / 384 / 512, 132 SMs); 128 without the grid's
    size; the grouped kernel's largest, 128, beyond its choices."""
    from kbitcupy.wgmma import GROUPED_TOK_CHOICES, TOK_CHOICES, choose_tok

    assert [choose_tok(M) for M in (1, 16, 17, 64, 65, 128, 129, 192, 193, 256, 512)] == \
        [16, 16, 32, 64, 128, 128, 192, 192, 128, 128, 128]
    # (N / 128 column strips, K / 64 K tiles) -> the measured faster TOK at M = 256, 384, 512
    measured = {"gateup": ((40, 32), (128, 128, 192)), "down": ((16, 80), (128, 192, 128)),
                "Q": ((32, 32), (128, 192, 128)), "O": ((16, 64), (128, 192, 128))}
    for name, ((strips, ktiles), want) in measured.items():
        assert tuple(choose_tok(M, TOK_CHOICES, strips, 132, ktiles) for M in (256, 384, 512)) == want, name
    assert [choose_tok(M, GROUPED_TOK_CHOICES, 40, 132, 32) for M in (100, 128, 129, 1000)] == [128, 128, 128, 128]
