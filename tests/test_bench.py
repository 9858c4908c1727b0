"""Benchmark harness: CPU tests of the pure-Python parts; one GPU smoke test."""
import importlib.util
import json
import os

import pytest

from kbitcupy import bench as B

HERE = os.path.dirname(os.path.abspath(__file__))


def _load_ncu_driver():
    path = os.path.join(os.path.dirname(HERE), "profiling", "ncu_driver.py")
    spec = importlib.util.spec_from_file_location("ncu_driver", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ----------------------------------------------------------------------------- rotation math
@pytest.mark.parametrize("nbytes", [1, 300_000, 2_621_440, 5_242_880, 20_971_520, 50 << 20, 300 << 20])
@pytest.mark.parametrize("l2", [40 << 20, 50 << 20, 60 << 20])
def test_rotation_count_spans_4x_l2(nbytes, l2):
    R = B.rotation_count(nbytes, l2)
    assert R >= 2
    assert R * nbytes >= 4 * l2
    if R > 2:  # and no more copies than needed
        assert (R - 1) * nbytes < 4 * l2


def test_rotation_count_examples():
    assert B.rotation_count(5 << 20, 50 << 20) == 40  # 5 MiB weight, 50 MiB L2
    assert B.rotation_count(21 << 20, 50 << 20) == 10
    assert B.rotation_count(500 << 20, 50 << 20) == 2
    with pytest.raises(ValueError):
        B.rotation_count(0, 50 << 20)


@pytest.mark.parametrize("R", [2, 3, 7, 10, 31, 32, 33, 40, 100, 729])
def test_launch_count(R):
    n = B.launch_count(R)
    assert n % R == 0 and n >= B.MIN_LAUNCHES
    assert n - R < B.MIN_LAUNCHES  # one pass fewer would be too few
    if R >= B.MIN_LAUNCHES:
        assert n == R


def test_summarize_median():
    s = B.summarize([3.0, 1.0, 2.0, 10.0, 2.5], R=4)
    assert s["us"] == 2.5 and s["min_us"] == 1.0 and s["max_us"] == 10.0 and s["R"] == 4
    assert len(s["samples_us"]) == 5


# ----------------------------------------------------------------------------- registry / CLI parsing
def test_shapes_and_columns():
    assert B.DENSE_SHAPES["gateup"] == (2048, 5120) and B.SHAPES["down"].K == 5120 and B.SHAPES["down"].N == 2048
    assert set(B.TOTAL_SHAPES) == {"gateup", "down", "Q", "O", "KV"}
    assert B.parse_shapes("dense") == list(B.DENSE_SHAPES)
    assert B.parse_shapes("gateup,q,kv,gateup") == ["gateup", "Q", "KV"]
    assert B.parse_shapes("all") == list(B.SHAPES)
    with pytest.raises(ValueError):
        B.parse_shapes("nope")
    assert [c.name for c in B.parse_columns(None)] == [c.name for c in B.COLUMNS]
    assert [c.name for c in B.parse_columns("matmul")] == ["matmul"]
    with pytest.raises(ValueError):
        B.parse_columns("cutlass")
    assert B.parse_ints("1, 2,4", "--M") == [1, 2, 4]
    gemv = B.parse_columns("GEMV")[0]
    assert gemv.applies(B.SHAPES["gateup"], 8) and not gemv.applies(B.SHAPES["gateup"], 9)
    moe = B.Shape("moe_gu", 2048, 512, experts=8)
    assert moe.E == 8 and not any(c.applies(moe, 1) for c in B.COLUMNS)


@pytest.mark.parametrize("argv", [["--reps", "5"], ["--k", "6"], ["--M", "0"], ["--shapes", "xx"],
                                  ["--columns", "xx"], ["--dtype", "fp32"]])
def test_main_rejects_bad_args_before_touching_the_gpu(argv):
    with pytest.raises(SystemExit):
        B.main(argv)


# ----------------------------------------------------------------------------- tables, totals, files
def fake_results(dtype="fp16"):
    """A results dict as run() builds it, with made-up times."""
    shapes, ks, Ms = ["gateup", "KV", "lin_key"], [2, 4], [1, 16]
    names = ["GEMV", "matmul"]
    cells = []
    for si, s in enumerate(shapes):
        K, N = B.DENSE_SHAPES[s]
        for k in ks:
            for M in Ms:
                base = 2.0 + si + k / 4 + M / 16
                cols = {"matmul": {"us": base + 1.0, "check_ok": True}}
                if M <= 8:
                    cols["GEMV"] = {"us": base, "check_ok": True}
                if s == "lin_key" and M == 16:
                    cols["matmul"] = {"us": None, "error": "RuntimeError: capture"}
                cell = dict(shape=s, K=K, N=N, experts=None, k=k, M=M, columns=cols,
                            cublas={"us": 10.0 + si}, sol={"us": 1.5})
                cells.append(B.finish_cell(cell, names))
    meta = dict(gpu="NVIDIA H100 80GB HBM3", date="2026-11-22", timestamp="2026-11-22T10:00:00+00:00",
                command="python profiling/bench.py --M 1,16 --k 2,4", git="31fa14f-dirty",
                versions={"CuPy": "14.2.0", "torch": "2.9"}, l2_bytes=50 << 20, sm_count=132, dtype=dtype, reps=20,
                columns=names, M=Ms, k=ks, shapes=shapes, total_shapes=["gateup", "KV"],
                shape_dims={s: dict(K=B.DENSE_SHAPES[s][0], N=B.DENSE_SHAPES[s][1], experts=None) for s in shapes},
                method={}, notes=[])
    host = [dict(shape=s, k=k, M=1, wall_us=20.0 + k, enqueue_us=19.0, calls=200) for s in shapes for k in ks]
    return dict(meta=meta, cells=cells, totals=B.compute_totals(cells, meta["total_shapes"], Ms, ks, names),
                host_overhead=host)


def test_finish_cell():
    c = B.finish_cell(dict(columns={"GEMV": {"us": 4.0}, "matmul": {"us": 5.0}}, cublas={"us": 8.0},
                           sol={"us": 2.0}), ["GEMV", "matmul"])
    assert c["best"] == "GEMV" and c["best_us"] == 4.0 and c["vs_cublas"] == 2.0 and c["pct_sol"] == 50.0
    # a column that failed the output check cannot be Best
    c = B.finish_cell(dict(columns={"GEMV": {"us": 4.0, "check_ok": False}, "matmul": {"us": 5.0}},
                           cublas={"us": None, "error": "torch not installed"}, sol={"us": 2.0}), ["GEMV", "matmul"])
    assert c["best"] == "matmul" and c["vs_cublas"] is None and c["pct_sol"] == 40.0
    c = B.finish_cell(dict(columns={}, cublas={"us": 8.0}, sol={"us": 2.0}), ["GEMV"])
    assert c["best"] is None and c["vs_cublas"] is None


def test_totals():
    res = fake_results()
    t = {(x["M"], x["k"]): x for x in res["totals"]}
    assert set(t) == {(1, 2), (1, 4), (16, 2), (16, 4)}
    idx = {(c["shape"], c["k"], c["M"]): c for c in res["cells"]}
    for (M, k), x in t.items():
        assert x["shapes"] == ["gateup", "KV"]  # lin_key is not a TOTAL shape
        best = idx[("gateup", k, M)]["best_us"] + idx[("KV", k, M)]["best_us"]
        assert x["best_us"] == pytest.approx(best)
        assert x["cublas_us"] == pytest.approx(10.0 + 11.0)
        assert x["vs_cublas"] == pytest.approx(21.0 / best)
        assert x["pct_sol"] == pytest.approx(100 * 3.0 / best)
    assert t[(16, 4)]["columns"]["GEMV"] is None  # GEMV does not run M=16: no column sum
    assert t[(1, 4)]["columns"]["GEMV"] == pytest.approx(idx[("gateup", 4, 1)]["columns"]["GEMV"]["us"]
                                                         + idx[("KV", 4, 1)]["columns"]["GEMV"]["us"])
    # any missing Best makes the TOTAL unknown rather than too small
    cells = [dict(c, best_us=None) if c["shape"] == "KV" else c for c in res["cells"]]
    assert all(x["best_us"] is None for x in B.compute_totals(cells, ["gateup", "KV"], [1], [2], ["GEMV"]))


def test_format_tables():
    res = fake_results()
    md = B.format_tables(res)
    assert md.count("### M = ") == 2
    m1, m16 = md.split("### M = 16")
    header = "| shape | k | GEMV | matmul | fp16 | SOL | Best | vs fp16 | % of SOL |"
    assert header in m1 and header in m16
    # gateup k=2 M=1: GEMV 2.5625, matmul 3.5625, fp16 10, SOL 1.5
    assert "| gateup | 2 | 2.56 | 3.56 | 10.00 | 1.50 | GEMV | 3.90x | 59% |" in m1
    assert "| gateup | 2 | - | 4.50 | 10.00 | 1.50 | matmul | 2.22x | 33% |" in m16  # GEMV does not apply
    assert "| lin_key | 4 | - | err | 12.00 | 1.50 | - | - | - |" in m16
    # TOTAL rows: one per k, Best and fp16 summed over gateup + KV
    tot = [ln for ln in m1.splitlines() if ln.startswith("| TOTAL")]
    assert len(tot) == 2
    # k=2, M=1: best 2.5625 + 3.5625, fp16 21, SOL 3, GEMV sum, matmul sum
    assert tot[0] == "| TOTAL | 2 | 6.12 | 8.12 | 21.00 | 3.00 | 6.12 | 3.43x | 49% |"
    for ln in md.splitlines():
        if ln.startswith("| ") and not ln.startswith("| shape"):
            assert ln.count("|") == header.count("|"), ln  # same number of cells on every row
    assert "| bf16 |" in B.format_tables(fake_results("bf16")).splitlines()[2]


def test_format_report_and_host_table():
    res = fake_results()
    rep = B.format_report(res)
    assert rep.startswith("# kbitcupy kernel benchmark: NVIDIA H100 80GB HBM3, 2026-11-22")
    assert "`python profiling/bench.py --M 1,16 --k 2,4`" in rep
    assert "TOTAL = sum over gateup, KV" in rep
    assert "| shape | k=2 | k=4 |" in rep and "| gateup | 22.00 | 24.00 |" in rep
    assert "## Host overhead" in rep


def test_fmt():
    assert B.fmt_entry(None) == "-" and B.fmt_entry({}) == "-"
    assert B.fmt_entry({"us": None, "error": "x"}) == "err"
    assert B.fmt_entry({"us": 3.14159}) == "3.14"
    assert B.fmt_entry({"us": 3.14159, "check_ok": False}) == "3.14!"
    assert B.fmt_x(1.234) == "1.23x" and B.fmt_pct(45.6) == "46%" and B.fmt_us(None) == "-"


def test_slug_and_paths(tmp_path):
    assert B.slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert B.slug("NVIDIA H200") == "nvidia-h200"
    p = B.output_paths(str(tmp_path), "NVIDIA H200", "2026-11-22", "baseline")
    assert os.path.basename(p["md"]) == "nvidia-h200_2026-11-22_baseline.md"
    assert os.path.basename(p["json"]) == "nvidia-h200_2026-11-22_baseline.json"
    open(p["md"], "w").close()
    p2 = B.output_paths(str(tmp_path), "NVIDIA H200", "2026-11-22", "baseline")
    assert os.path.basename(p2["md"]) == "nvidia-h200_2026-11-22_baseline-2.md"  # earlier run kept


def test_write_outputs_json_roundtrip(tmp_path):
    res = fake_results()
    files = B.write_outputs(res, str(tmp_path / "results"), "unit", want_plot=False)
    assert os.path.basename(files["md"]) == "nvidia-h100-80gb-hbm3_2026-11-22_unit.md"
    with open(files["json"]) as f:
        back = json.load(f)
    assert back["meta"]["gpu"] == "NVIDIA H100 80GB HBM3" and back["meta"]["files"] == files
    assert len(back["cells"]) == len(res["cells"]) and back["totals"] == json.loads(json.dumps(res["totals"]))
    with open(files["md"]) as f:
        assert f.read() == B.format_report(res)


def test_plot(tmp_path):
    pytest.importorskip("matplotlib")
    path = str(tmp_path / "p.png")
    assert B.plot(fake_results(), path)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_main_orchestration_with_fake_gpu(tmp_path, monkeypatch, capsys):
    """run()/main() end to end on the CPU, every device call replaced by a fake: checks the
    loop structure, which columns run where, the bytes SOL reads, and the files written."""
    import numpy as np

    calls = {"kbit": [], "sol": [], "cublas": [], "host": []}
    L2 = 50 << 20

    class FakeQW:
        def __init__(self, shape, k):
            self.packed = np.zeros(shape.N * shape.K // 32 * k, np.uint32)
            self.absmax = np.zeros(shape.N * shape.K // 32, np.uint8)

    def fake_copies(shape, k, l2):
        qw = FakeQW(shape, k)
        per = qw.packed.nbytes + qw.absmax.nbytes
        return qw, [qw] * B.rotation_count(per, l2), per

    def fake_time_kbit(col, shape, M, copies, A, out, reps):
        assert A.shape == (M, shape.K) and out.shape == (M, shape.N) and col.applies(shape, M)
        calls["kbit"].append((col.name, shape.name, M))
        if col.name == "matmul" and M > 8:
            raise RuntimeError("cuBLAS refused during capture")
        return B.summarize([1.0 + M / 8 + (col.name == "matmul")] * reps, R=len(copies),
                           launches=B.launch_count(len(copies)))

    def fake_sol(nbytes, l2, sms, reps):
        calls["sol"].append(nbytes)
        return B.summarize([0.5] * reps, R=B.rotation_count(nbytes, l2), bytes=nbytes)

    def fake_cublas(shape, Ms, dtype, l2, reps):
        calls["cublas"].append(shape.name)
        return {M: B.summarize([4.0] * reps) for M in Ms}

    def fake_host(qw, shape, dtype, calls_=200):
        calls["host"].append(shape.name)
        return dict(wall_us=25.0, enqueue_us=24.0, calls=calls_)

    monkeypatch.setattr(B, "_device_info", lambda: ("NVIDIA Fake GPU", L2, 132))
    monkeypatch.setattr(B, "_versions", lambda: {"CuPy": "x", "torch": "y"})
    monkeypatch.setattr(B, "kbit_weight_copies", fake_copies)
    monkeypatch.setattr(B, "time_kbit", fake_time_kbit)
    monkeypatch.setattr(B, "time_sol", fake_sol)
    monkeypatch.setattr(B, "time_cublas_shape", fake_cublas)
    monkeypatch.setattr(B, "host_overhead", fake_host)
    monkeypatch.setattr(B, "check_output", lambda col, ctx, ref: 1e-3)
    monkeypatch.setattr(B, "_reference_weight", lambda qw: "Wd")
    monkeypatch.setattr(B, "_reference_output", lambda A, Wd: "ref")
    monkeypatch.setattr(B, "_free_pool", lambda: None)
    monkeypatch.setattr(B, "_rand", lambda shape, dtype: np.ones(shape, np.float16))
    monkeypatch.setattr(B, "_empty", lambda shape, dtype: np.empty(shape, np.float16))

    res = B.main(["--M", "1,16", "--k", "2,4", "--shapes", "gateup,KV,lin_key", "--out", str(tmp_path), "--tag", "t"],
                 command="python profiling/bench.py fake")
    assert calls["cublas"] == ["gateup", "KV", "lin_key"]  # once per shape, all M at once
    assert len(calls["host"]) == 3 * 2
    assert ("GEMV", "gateup", 16) not in calls["kbit"] and ("GEMV", "gateup", 1) in calls["kbit"]
    assert len(res["cells"]) == 3 * 2 * 2 and len(calls["sol"]) == 12
    for c in res["cells"]:
        k, M, K, N = c["k"], c["M"], c["K"], c["N"]
        assert c["weight_bytes"] == N * K * k // 8 + N * K // 32  # packed words + E4M4 absmax
        assert c["sol"]["bytes"] == c["weight_bytes"] + M * K * 2  # + A
        if M == 1:
            assert c["best"] == "GEMV" and c["columns"]["matmul"]["us"] is not None
        else:
            assert "GEMV" not in c["columns"] and c["columns"]["matmul"]["error"].startswith("RuntimeError")
            assert c["best"] is None
    assert [(t["M"], t["k"]) for t in res["totals"]] == [(1, 2), (1, 4), (16, 2), (16, 4)]
    assert res["totals"][0]["shapes"] == ["gateup", "KV"] and res["totals"][0]["cublas_us"] == 8.0
    assert any("missing: down, Q, O" in n for n in res["meta"]["notes"])
    out = capsys.readouterr().out
    assert "### M = 1" in out and "### M = 16" in out and "`python profiling/bench.py fake`" in out
    files = res["meta"]["files"]
    assert os.path.basename(files["md"]) == "nvidia-fake-gpu_" + res["meta"]["date"] + "_t.md"
    with open(files["json"]) as f:
        assert json.load(f)["cells"][0]["columns"]["GEMV"]["check_ok"] is True


# ----------------------------------------------------------------------------- SOL kernel source
def test_sol_kernel_compiles_and_keeps_its_loads():
    """NVRTC (no GPU needed): the streaming-read kernel compiles and its 16-byte loads survive."""
    from kbitcupy._compile import _nvrtc

    try:
        nvrtc = _nvrtc()
        prog = nvrtc.createProgram(B.SOL_SRC, "sol.cu", [], [])
    except Exception as e:  # pragma: no cover - no NVRTC here
        pytest.skip(f"NVRTC not available: {e}")
    try:
        nvrtc.compileProgram(prog, ["--gpu-architecture=compute_90", "--std=c++17"])
        ptx = nvrtc.getPTX(prog)
    finally:
        nvrtc.destroyProgram(prog)
    ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
    loads = [ln for ln in ptx.splitlines() if "ld.global" in ln and ".v4." in ln]
    assert len(loads) >= 5, ptx  # 4 in the unrolled loop + 1 in the tail


def test_sol_blocks():
    assert B.sol_blocks(1, 132) == 1
    assert B.sol_blocks(32768, 132) == 128  # 0.5 MB: one 16-byte load per thread
    assert B.sol_blocks(10 ** 9, 132) == 132 * 8


# ----------------------------------------------------------------------------- ncu parsing
DETAILS_CSV = '''==PROF== Connected to process 1234
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1234","python","127.0.0.1","kbit_dequantize","1","7","(256, 1, 1)","(2112, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","5,120"
"1","1234","python","127.0.0.1","sm90_xmma_gemm","1","7","(128, 1, 1)","(40, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","7.5"
"2","1234","python","127.0.0.1","kbit_dequantize","1","7","(256, 1, 1)","(2112, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","4880"
"3","1234","python","127.0.0.1","sm90_xmma_gemm","1","7","(128, 1, 1)","(40, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","8.5"
==PROF== Disconnected from process 1234
'''

RAW_CSV = '''"ID","Process ID","Kernel Name","gpu__time_duration.sum"
"","","","nsecond"
"0","99","kbit_gemv","9000"
"1","99","kbit_gemv","11000"
'''


def test_parse_ncu_details_and_raw():
    nd = _load_ncu_driver()
    k = nd.parse_ncu_csv(DETAILS_CSV)
    assert [x[1] for x in k] == ["kbit_dequantize", "sm90_xmma_gemm"] * 2
    assert [x[2] for x in k] == pytest.approx([5.12, 7.5, 4.88, 8.5])
    us, by = nd.per_call(k, 2)
    assert us == pytest.approx(13.0)  # every kernel of a call is summed into its time
    assert by["kbit_dequantize"] == (2, pytest.approx(5.0)) and by["sm90_xmma_gemm"] == (2, pytest.approx(8.0))
    r = nd.parse_ncu_csv(RAW_CSV)
    assert [x[2] for x in r] == pytest.approx([9.0, 11.0])
    assert nd.per_call(r, 2)[0] == pytest.approx(10.0)
    assert nd.parse_ncu_csv("==PROF== nothing profiled\n") == []


# ----------------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_bench_smoke_gpu(tmp_path):
    res = B.main(["--M", "1,2", "--k", "4", "--shapes", "KV", "--reps", "15", "--out", str(tmp_path), "--tag", "smoke",
                  "--plot"])
    m = res["meta"]
    assert os.path.exists(m["files"]["md"]) and os.path.exists(m["files"]["json"])
    assert len(res["cells"]) == 2 and len(res["totals"]) == 2 and len(res["host_overhead"]) == 1
    for c in res["cells"]:
        g = c["columns"]["GEMV"]
        assert g["us"] > 0 and g["check_ok"], g
        assert g["R"] * c["weight_bytes"] >= 4 * m["l2_bytes"]
        assert c["sol"]["us"] > 0 and c["sol"]["R"] * c["sol"]["bytes"] >= 4 * m["l2_bytes"]
        assert c["best"] in ("GEMV", "matmul")
        if m["versions"]["torch"] != "not installed":
            assert c["cublas"]["us"] > 0
    assert res["host_overhead"][0]["wall_us"] > 0
