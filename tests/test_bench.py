"""Benchmark harness: CPU tests of the pure-Python parts; one GPU smoke test."""
import importlib.util
import json
import os

import numpy as np
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
    # all but the opt-in safe-PDL columns
    assert [c.name for c in B.parse_columns(None)] == [c.name for c in B.COLUMNS if c.name not in B.PLAIN_COLUMNS]
    assert [c.name for c in B.parse_columns("matmul")] == ["matmul"]
    with pytest.raises(ValueError):
        B.parse_columns("cutlass")
    assert B.parse_ints("1, 2,4", "--M") == [1, 2, 4]
    gemv = B.parse_columns("GEMV")[0]
    mx = B.gemv_max_rows(2, B.SHAPES["gateup"].N)  # 32: a CTA's token tiles
    assert gemv.applies(B.SHAPES["gateup"], mx) and not gemv.applies(B.SHAPES["gateup"], mx + 1)
    ts = B.gemv_max_rows(2, B.SHAPES["KV"].N)  # KV: the token split's rows
    assert ts > mx and gemv.applies(B.SHAPES["KV"], ts) and not gemv.applies(B.SHAPES["KV"], ts + 1)
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
    host = [dict(shape=s, k=k, M=1, wall_us=20.0 + k, enqueue_us=19.0, wall_min_us=19.5 + k, launch_us=4.0 + k / 10,
                 calls=200) for s in shapes for k in ks]
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
    # the fastest run and the host's bare launch (its floor) beside each k's median
    assert "| k=2 fastest run | k=4 fastest run | k=2 bare launch | k=4 bare launch |" in rep
    assert "| gateup | 22.00 | 24.00 | 21.50 | 23.50 | 4.20 | 4.40 |" in rep


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
            self.k = k
            self.packed = np.zeros(shape.N * shape.K // 32 * k, np.uint32)
            self.absmax = np.zeros(shape.N * shape.K // 32, np.uint8)

    def fake_copies(shape, k, l2):
        qw = FakeQW(shape, k)
        per = qw.packed.nbytes + qw.absmax.nbytes
        return qw, [qw] * B.rotation_count(per, l2), per

    def fake_time_kbit(col, shape, M, copies, A, out, reps):
        assert A.shape == (M, shape.K) and out.shape == (M, shape.N) and col.applies(shape, M)
        calls["kbit"].append((col.name, shape.name, M))
        if col.name == "GEMM" and copies[0].k == 4:
            raise B.NotApplicable("does not fit: shared memory")  # shown as '-', never 'err'
        if col.name in ("matmul", "dq+cuBLAS") and M > 8:
            raise RuntimeError("cuBLAS refused during capture")
        if col.name == B.PDL_COLUMN:  # fastest of all, but never Best (fp16 is not PDL-launched)
            return B.summarize([0.25] * reps, R=len(copies), launches=B.launch_count(len(copies)))
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

    res = B.main(["--M", "1,40", "--k", "2,4", "--shapes", "gateup,KV,lin_key", "--out", str(tmp_path), "--tag", "t"],
                 command="python profiling/bench.py fake")
    assert calls["cublas"] == ["gateup", "KV", "lin_key"]  # once per shape, all M at once
    assert len(calls["host"]) == 3 * 2
    assert ("GEMV", "gateup", 40) not in calls["kbit"] and ("GEMV", "gateup", 1) in calls["kbit"]
    assert len(res["cells"]) == 3 * 2 * 2 and len(calls["sol"]) == 12
    for c in res["cells"]:
        k, M, K, N = c["k"], c["M"], c["K"], c["N"]
        assert c["weight_bytes"] == N * K * k // 8 + N * K // 32  # packed words + E4M4 absmax
        assert c["sol"]["bytes"] == c["weight_bytes"] + M * K * 2  # + A
        # (KV at M = 40: the GEMV's token split, its few column groups' rows on CTAs of their own)
        assert set(c["columns"]) == ({"GEMV", "GEMM", "dq+cuBLAS", "matmul", "matmul+PDL", "GEMV+PDL", "GEMM+PDL"}
                                     if M == 1 or c["shape"] == "KV"
                                     else {"GEMM", "dq+cuBLAS", "matmul", "matmul+PDL", "GEMM+PDL"})
        assert c["best"] != B.PDL_COLUMN and c["vs_cublas_pdl"] == pytest.approx(4.0 / 0.25)
        if k == 4:
            assert c["columns"]["GEMM"] == {"us": None, "skipped": "does not fit: shared memory"}
            assert B.fmt_entry(c["columns"]["GEMM"]) == "-"
        if M == 1:
            assert c["best"] == "GEMV" and c["columns"]["matmul"]["us"] is not None
        else:
            assert ("GEMV" in c["columns"]) == (c["shape"] == "KV")
            assert c["columns"]["matmul"]["error"].startswith("RuntimeError")
            assert c["columns"]["dq+cuBLAS"]["error"].startswith("RuntimeError")
            assert c["best"] == ("GEMV" if c["shape"] == "KV" else "GEMM" if k == 2 else None)
    assert [(t["M"], t["k"]) for t in res["totals"]] == [(1, 2), (1, 4), (40, 2), (40, 4)]
    assert res["totals"][0]["shapes"] == ["gateup", "KV"] and res["totals"][0]["cublas_us"] == 8.0
    assert any("missing: down, Q, O" in n for n in res["meta"]["notes"])
    out = capsys.readouterr().out
    assert "### M = 1" in out and "### M = 40" in out and "`python profiling/bench.py fake`" in out
    files = res["meta"]["files"]
    assert os.path.basename(files["md"]) == "nvidia-fake-gpu_" + res["meta"]["date"] + "_t.md"
    with open(files["json"]) as f:
        assert json.load(f)["cells"][0]["columns"]["GEMV"]["check_ok"] is True


# ----------------------------------------------------------------------------- dense columns / CLI (issue 4)
def _sm90() -> bool:
    try:
        import cupy as cp

        return cp.cuda.Device().compute_capability == "90"
    except Exception:
        return False


def test_dense_columns_registry():
    assert [c.name for c in B.COLUMNS] == ["GEMV", "STREAM", "GEMM", "WGMMA", "dq+cuBLAS", "matmul", "matmul+PDL",
                                           "matmul:plain", "GEMV+PDL", "GEMM+PDL", "WGMMA+PDL", "STREAM+PDL"]
    # the safe-PDL columns only when named
    assert "matmul:plain" not in [c.name for c in B.parse_columns(None)]
    assert [c.name for c in B.parse_columns("matmul,matmul:plain")] == ["matmul", "matmul:plain"]
    assert "Grouped:plain" not in [c.name for c in B.parse_moe_columns(None)]
    assert [c.name for c in B.parse_moe_columns("Grouped:plain")] == ["Grouped:plain"]
    by = {c.name: c for c in B.COLUMNS}
    g = B.SHAPES["gateup"]
    for M in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
        assert by["GEMV"].applies(g, M) == (M <= 32)
        assert by["WGMMA"].applies(g, M) == _sm90()  # the Hopper kernel: compute capability 9.0 only
        assert by["STREAM"].applies(g, M) == (_sm90() and M <= 32)  # streaming GEMV: sm_90, M <= 32
        assert by["GEMM"].applies(g, M) and by["dq+cuBLAS"].applies(g, M) and by["matmul"].applies(g, M)
    for sname in ("moe_gu", "moe_gu_fused", "moe_dn"):  # expert shapes go through MOE_COLUMNS
        assert not any(c.applies(B.SHAPES[sname], 1) for c in B.COLUMNS)
    assert B.fmt_entry({"us": None, "skipped": "does not fit"}) == "-"  # not 'err'


def test_parse_columns_both_registries():
    assert [c.name for c in B.parse_columns("GEMM,dq+cuBLAS")] == ["GEMM", "dq+cuBLAS"]
    assert [c.name for c in B.parse_columns("dq,mma")] == ["dq+cuBLAS", "GEMM"]  # aliases, order kept
    none_named = lambda cols: [c.name for c in cols if c.name not in B.PLAIN_COLUMNS]  # noqa: E731
    assert [c.name for c in B.parse_moe_columns("GEMM")] == none_named(B.MOE_COLUMNS)  # none named: all (not opt-in)
    assert [c.name for c in B.parse_moe_columns("grouped,GEMV")] == ["Grouped"]
    assert [c.name for c in B.parse_columns("Grouped")] == none_named(B.COLUMNS)
    with pytest.raises(ValueError):
        B.parse_moe_columns("cutlass")


def test_parse_shapes_custom():
    """KxN names a dense shape the model does not have (K inputs, N outputs), outside TOTAL."""
    try:
        assert B.parse_shapes("gateup,4096x14336,1536X2048") == ["gateup", "4096x14336", "1536x2048"]
        sh = B.SHAPES["4096x14336"]
        assert (sh.K, sh.N, sh.experts) == (4096, 14336, None) and "4096x14336" not in B.TOTAL_SHAPES
        for bad in ("0x128", "12x", "x12", "12x34x56"):
            with pytest.raises(ValueError, match="unknown shape"):
                B.parse_shapes(bad)
        with pytest.raises(ValueError, match="multiple of 32"):
            B.parse_shapes("100x128")
    finally:
        B.SHAPES.pop("4096x14336", None)
        B.SHAPES.pop("1536x2048", None)


def test_parse_shapes_moe_none():
    assert B.parse_shapes("moe") == ["moe_gu", "moe_gu_fused", "moe_dn"]
    assert B.parse_shapes("none") == [] and B.parse_shapes("dense,none") == list(B.DENSE_SHAPES)
    assert B.parse_shapes("all") == list(B.DENSE_SHAPES) + ["moe_gu", "moe_gu_fused", "moe_dn"]
    s = B.moe_shapes()
    assert (s["moe_gu"].K, s["moe_gu"].N) == (2048, 512) and (s["moe_gu_fused"].K, s["moe_gu_fused"].N) == (2048, 1024)
    assert (s["moe_dn"].K, s["moe_dn"].N) == (512, 2048)
    assert (B.moe_shapes(256, 128)["moe_dn"].K, B.moe_shapes(256, 128)["moe_dn"].N) == (128, 256)


def test_cli_defaults_quick_and_large_M():
    p = B.build_parser()
    a = B.resolve_args(p.parse_args([]))
    assert (a.M, a.k, a.moe_M, a.experts, a.layer_T, a.reps) == ("1,2,4,8", "2,3,4,5", "1,2,4,8,16,32,64", "8,10",
                                                                  "1,8,32", 20)
    assert a.shapes == "dense" and not a.moe_layer and a.topk == 10 and a.bank_experts == 512
    a = B.resolve_args(p.parse_args(["--M", "1,2,4,8,16,32,64,128,256,512"]))
    assert B.parse_ints(a.M, "--M") == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    a = B.resolve_args(p.parse_args(["--quick", "--k", "4"]))
    assert a.k == "4" and a.M == B.QUICK["M"] and a.reps == B.QUICK["reps"]  # explicit wins over --quick
    assert "--bank-experts" not in p.format_help()  # hidden smoke-test options


@pytest.mark.parametrize("argv", [["--shapes", "none"], ["--shapes", "moe", "--experts", "0"],
                                  ["--shapes", "moe", "--experts", "600"], ["--moe-M", "0", "--shapes", "moe"],
                                  ["--moe-layer", "--topk", "0"], ["--moe-layer", "--layer-T", "x"],
                                  ["--moe-layer", "--moe-inter", "100"]])
def test_main_rejects_bad_moe_args(argv):
    with pytest.raises(SystemExit):
        B.main(argv)


# ----------------------------------------------------------------------------- MoE rotation / routing (issue 5)
def test_moe_rotation_reads_the_whole_bank_before_reuse():
    for E in (8, 10):
        B_ = 512
        seen = [B.moe_launch_experts(r, E, B_) for r in range(200)]
        assert all(len(set(s)) == E for s in seen)  # E distinct experts per launch
        flat = [e for s in seen for e in s]
        # expert e is read again exactly B_ expert-reads later
        assert all(flat[i] == flat[i + B_] for i in range(len(flat) - B_))
        assert len(set(flat[:B_])) == B_
        starts = [B.moe_bmm_start(r, E, B_) for r in range(200)]
        assert all(0 <= s and s + E <= B_ for s in starts)  # a contiguous slice, no wrap
        assert starts[:3] == [0, E, 2 * E] and starts[B_ // E] == 0
    with pytest.raises(ValueError):
        B.moe_launch_experts(0, 20, 16)


def test_kbit_expert_bytes():
    for N, K in ((512, 2048), (1024, 2048), (2048, 512)):
        for k in (2, 3, 4, 5):
            assert B.kbit_expert_bytes(N, K, k) == N * K * k // 8 + N * K // 32


def test_moe_launches():
    n = B.moe_launches(8 * B.kbit_expert_bytes(512, 2048, 4), 60 << 20)
    assert n >= B.MIN_LAUNCHES and n * 8 * B.kbit_expert_bytes(512, 2048, 4) >= 4 * (60 << 20)


def test_layer_plan():
    l2 = 60 << 20
    per = B.kbit_expert_bytes(1024, 2048, 2) + B.kbit_expert_bytes(2048, 512, 2)
    R, w, n = B.layer_plan(1, 10, 512, per, l2)
    step = B.expected_distinct(1, 10, 512) * per
    assert w >= 1 and w * step >= l2 and R >= 2 * w + 2 and R * step >= 4 * l2 and n >= R
    R, w, n = B.layer_plan(32, 10, 512, per, l2)
    assert w == 0 and R >= 2 and n >= B.LAYER_MIN_LAUNCHES
    assert B.expected_distinct(1, 10, 512) == pytest.approx(10.0)
    assert 230 < B.expected_distinct(32, 10, 512) < 250


@pytest.mark.parametrize("T,topk,Bn,R,w", [(1, 10, 512, 30, 8), (8, 10, 512, 6, 1), (32, 10, 512, 4, 0),
                                           (4, 4, 16, 6, 2)])
def test_routing_draws(T, topk, Bn, R, w):
    draws = B.routing_draws(T, topk, Bn, R, w, seed=3)
    assert len(draws) == R
    for ids, wts in draws:
        assert ids.shape == (T, topk) and ids.dtype == np.int32 and wts.dtype == np.float32
        assert ids.min() >= 0 and ids.max() < Bn
        assert all(len(set(row)) == topk for row in ids.tolist())  # distinct experts per token
        assert np.allclose(wts.sum(1), 1.0, atol=1e-5) and (wts > 0).all()
        assert (np.diff(wts, axis=1) <= 1e-7).all()  # top-k in descending logit order
    sets = [set(d[0].ravel().tolist()) for d in draws]
    max_mask = min(Bn // 2, Bn - topk)
    for r in range(R):
        for d in range(1, w + 1):
            near = sets[(r + d) % R]
            if (r + d) % R != r and len(sets[r]) * 2 * w <= max_mask:
                assert not (sets[r] & near), (r, d)  # no reuse between nearby steps
    again = B.routing_draws(T, topk, Bn, R, w, seed=3)
    assert all((a[0] == b[0]).all() for a, b in zip(draws, again))  # deterministic


def test_fp16_layer_plan_matches_moe_reference_route():
    from kbitcupy.moe import reference_route

    rng = np.random.default_rng(0)
    ids = np.stack([rng.permutation(64)[:6] for _ in range(5)]).astype(np.int32)
    tok, pos, segs = B.fp16_layer_plan(ids)
    r = reference_route(ids, 64)
    assert (tok == r.sorted_token).all() and (pos == r.pos).all()
    n = len(segs)
    assert [e for e, _, _ in segs] == r.expert_ids[:n].tolist()
    assert [a for _, a, _ in segs] == r.offsets[:n].tolist() and segs[-1][2] == ids.size


def test_fp16_layer_step_on_cpu_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    T, topk, E, H, I = 3, 2, 6, 16, 8
    x = rng.standard_normal((T, H)).astype(np.float32)
    Wgu = (rng.standard_normal((E, 2 * I, H)) * 0.3).astype(np.float32)
    Wdn = (rng.standard_normal((E, H, I)) * 0.3).astype(np.float32)
    ids = np.stack([rng.permutation(E)[:topk] for _ in range(T)]).astype(np.int32)
    w = rng.random((T, topk)).astype(np.float32)
    tok, pos, segs = B.fp16_layer_plan(ids)
    plan = (torch.as_tensor(tok), torch.as_tensor(pos), segs, torch.as_tensor(w))
    P = T * topk
    bufs = (torch.empty(P, H), torch.empty(P, 2 * I), torch.empty(P, H), torch.empty(T, H))
    B._fp16_layer_step(torch.as_tensor(x), torch.as_tensor(Wgu), torch.as_tensor(Wdn), plan, bufs, I, T, topk)
    ref = np.zeros((T, H))
    for t in range(T):
        for j in range(topk):
            e = ids[t, j]
            h = Wgu[e].astype(np.float64) @ x[t]
            g, u = h[:I], h[I:]
            ref[t] += w[t, j] * (Wdn[e].astype(np.float64) @ (g / (1 + np.exp(-g)) * u))
    assert np.allclose(bufs[3].numpy(), ref, atol=1e-4, rtol=1e-4)


# ----------------------------------------------------------------------------- MoE tables
def fake_moe(with_totals=True):
    names = ["Grouped", "matmul loop"]  # a subset of B.MOE_COLUMNS: columns a run did not time are left out
    shapes = ["moe_gu", "moe_gu_fused", "moe_dn"]
    cells = []
    for si, s in enumerate(shapes):
        K, N = B.moe_shapes()[s].K, B.moe_shapes()[s].N
        for E in (8, 10):
            for k in (2, 4):
                for M in (1, 16):
                    base = 3.0 + si + k / 4 + M / 16 + E / 10
                    cols = {"Grouped": {"us": base, "check_ok": True}, "matmul loop": {"us": base * 4, "check_ok": True}}
                    if s == "moe_dn" and M == 16 and k == 4:
                        cols["Grouped"] = {"us": base, "check_ok": False, "max_rel_err": 0.5}
                    fp = {"loop": {"us": 20.0 + E, "check_ok": True}, "bmm": {"us": 8.0 + si, "check_ok": True}}
                    cell = dict(shape=s, K=K, N=N, experts=E, k=k, M=M, weight_bytes=1, columns=cols, fp16=fp,
                                sol={"us": 2.0})
                    cells.append(B.finish_moe_cell(cell, names))
    meta = dict(M=[1, 16], experts=[8, 10], k=[2, 4], shapes=shapes, columns=names, dtype="fp16", bank_experts=512,
                hidden=2048, inter=512, total_shapes=list(B.MOE_TOTAL_SHAPES) if with_totals else [],
                shape_dims={}, bank_bytes={"moe_gu,k=2": 150 << 20, "moe_gu_fused,k=4": 540 << 20}, notes=[],
                reps=20)
    return dict(meta=meta, cells=cells,
                totals=B.compute_moe_totals(cells, meta["total_shapes"], [1, 16], [8, 10], [2, 4], names))


def test_finish_moe_cell_uses_best_fp16():
    c = B.finish_moe_cell(dict(columns={"Grouped": {"us": 4.0}}, fp16={"loop": {"us": 12.0}, "bmm": {"us": 8.0}},
                               sol={"us": 2.0}), ["Grouped"])
    assert c["cublas"] == {"us": 8.0, "variant": "bmm"} and c["vs_cublas"] == 2.0 and c["pct_sol"] == 50.0
    c = B.finish_moe_cell(dict(columns={"Grouped": {"us": 4.0}}, fp16={"loop": {"us": 12.0},
                                                                       "bmm": {"us": 1.0, "check_ok": False}},
                               sol={"us": 2.0}), ["Grouped"])
    assert c["cublas"]["variant"] == "loop" and c["vs_cublas"] == 3.0  # a failed check is not the baseline
    c = B.finish_moe_cell(dict(columns={"Grouped": {"us": 4.0}}, fp16={"loop": {"us": None, "error": "boom"}},
                               sol={"us": 2.0}), ["Grouped"])
    assert c["cublas"] == {"us": None, "error": "boom"} and c["vs_cublas"] is None


def test_moe_columns_force_each_grouped_kernel():
    names = [c.name for c in B.MOE_COLUMNS]
    assert names[:4] == ["Grouped", "g-GEMV", "g-MMA", "g-WGMMA"] and "matmul loop" in names
    shape = B.moe_shapes()["moe_dn"]
    applies = {c.name: (c.applies(shape, 4), c.applies(shape, 32)) for c in B.MOE_COLUMNS}
    assert applies["g-GEMV"] == (True, False) and applies["g-MMA"] == (False, True)
    assert applies["g-WGMMA"] == (False, B._sm90())


def test_format_moe_tables_and_totals():
    moe = fake_moe()
    md = B.format_moe_tables(moe)
    assert md.count("### MoE, M = ") == 2 and "### MoE, M = 1 token per expert" in md
    m1, m16 = md.split("### MoE, M = 16 tokens per expert")
    header = "| shape | E | k | Grouped | matmul loop | fp16 loop | fp16 bmm | SOL | Best | vs fp16 | % of SOL |"
    assert header in m1 and header in m16
    # moe_gu E=8 k=2 M=1: base 3 + 0.5 + 0.0625 + 0.8 = 4.3625; fp16 best = bmm 8.0
    assert "| moe_gu | 8 | 2 | 4.36 | 17.45 | 28.00 | 8.00 | 2.00 | Grouped | 1.83x | 46% |" in m1
    # failed check: '!' and Best falls back to the matmul loop
    row = next(ln for ln in m16.splitlines() if ln.startswith("| moe_dn | 8 | 4 |"))
    assert "!" in row.split("|")[4] and "| matmul loop |" in row
    tot = [ln for ln in m1.splitlines() if ln.startswith("| TOTAL")]
    assert len(tot) == 4  # per (E, k)
    t = {(x["M"], x["experts"], x["k"]): x for x in moe["totals"]}
    idx = {(c["shape"], c["experts"], c["k"], c["M"]): c for c in moe["cells"]}
    x = t[(1, 10, 4)]
    assert x["shapes"] == ["moe_gu_fused", "moe_dn"]
    assert x["best_us"] == pytest.approx(idx[("moe_gu_fused", 10, 4, 1)]["best_us"] + idx[("moe_dn", 10, 4, 1)]["best_us"])
    assert x["fp16"]["bmm"] == pytest.approx(9.0 + 10.0) and x["fp16"]["loop"] == pytest.approx(60.0)
    assert x["vs_cublas"] == pytest.approx(19.0 / x["best_us"])
    for ln in md.splitlines():
        if ln.startswith("| ") and not ln.startswith("| shape"):
            assert ln.count("|") == header.count("|"), ln
    assert "| TOTAL" not in B.format_moe_tables(fake_moe(with_totals=False))
    assert "as moe_forward" not in md  # no Grouped:stable column in this run


def test_moe_totals_as_moe_forward():
    """With the opt-in Grouped:stable / Grouped:chained columns, the TOTAL as moe_forward launches them: at
    decode sizes (the cells' forward_decode) gate/up (fused) from Grouped, down from Grouped:stable (its ids
    are never written right before); above them both from Grouped:chained (each grouped call right after one
    of the package's kernels); no forward line where the run lacks the columns it needs."""
    names = ["Grouped", B.STABLE_COLUMN, B.CHAINED_COLUMN]
    cells = []
    for s, g, st, ch in (("moe_gu_fused", 7.0, 6.0, 5.5), ("moe_dn", 5.0, 4.0, 3.0)):
        cell = dict(shape=s, K=1, N=1, experts=8, k=4, M=1, weight_bytes=1, fp16={"bmm": {"us": 11.0}},
                    sol={"us": 2.0}, forward_decode=True,
                    columns={"Grouped": {"us": g}, B.STABLE_COLUMN: {"us": st}, B.CHAINED_COLUMN: {"us": ch}})
        cells.append(B.finish_moe_cell(cell, names))
    assert {B.STABLE_COLUMN, B.CHAINED_COLUMN} <= B.NOT_IN_BEST
    assert all(c["best_us"] in (7.0, 5.0) for c in cells)
    (t,) = B.compute_moe_totals(cells, list(B.MOE_TOTAL_SHAPES), [1], [8], [4], names)
    assert t["best_us"] == pytest.approx(12.0) and t["forward_us"] == pytest.approx(11.0)
    assert t["vs_cublas_forward"] == pytest.approx(2.0)
    meta = dict(M=[1], experts=[8], k=[4], shapes=list(B.MOE_TOTAL_SHAPES), columns=names, dtype="fp16")
    md = B.format_moe_tables(dict(meta=meta, cells=cells, totals=[t]))
    assert "as moe_forward launches them" in md and "E = 8, k = 4: 11.00 us, 2.00x fp16" in md
    assert f"moe_gu_fused Grouped + moe_dn {B.STABLE_COLUMN})" in md
    # above the decode sizes (the gather and silu_mul kernels in between): both chained
    M = B.GEMV_MAX_TOKENS + 1
    cells = [B.finish_moe_cell(dict(c, M=M, forward_decode=False), names) for c in cells]
    (t,) = B.compute_moe_totals(cells, list(B.MOE_TOTAL_SHAPES), [M], [8], [4], names)
    assert t["forward_us"] == pytest.approx(8.5) and t["vs_cublas_forward"] == pytest.approx(22.0 / 8.5)
    md = B.format_moe_tables(dict(meta=dict(meta, M=[M]), cells=cells, totals=[t]))
    assert f"moe_gu_fused {B.CHAINED_COLUMN} + moe_dn {B.CHAINED_COLUMN}" in md and "8.50 us, 2.59x fp16" in md
    # a run without the chained column: no forward line there
    (t,) = B.compute_moe_totals(cells, list(B.MOE_TOTAL_SHAPES), [M], [8], [4], names[:2])
    assert "forward_us" not in t
    # results written before forward_columns existed still format
    old = dict(t, forward_us=10.0, vs_cublas_forward=2.2)
    md = B.format_moe_tables(dict(meta=dict(meta, M=[M], columns=names[:2]), cells=cells, totals=[old]))
    assert f"moe_gu_fused {B.STABLE_COLUMN} + moe_dn {B.STABLE_COLUMN}" in md


def fake_layer(eager=False):
    rows = []
    for T in (1, 8):
        for k in (2, 4):
            mf = {"us": 30.0 + T + k, "method": "eager" if eager else "graph", "check_ok": True}
            if eager:
                mf["capture_error"] = "RuntimeError: sync during capture"
            fp = {"graph": {"us": 40.0 + 2 * T, "method": "graph", "check_ok": True}}
            if eager:
                fp["eager"] = {"us": 400.0 + T, "method": "eager", "check_ok": True}
            row = dict(T=T, k=k, experts_per_step=10.0 * T, R=10, launches=10, moe_forward=mf,
                       steps={"us": 10.0 + T + k, "method": "graph", "check_ok": True},
                       route={"us": 5.0, "method": "eager" if eager else "graph"}, fp16=fp, sol={"us": 4.0})
            rows.append(B.finish_layer_row(row))
    meta = dict(T=[1, 8], k=[2, 4], dtype="fp16", bank_experts=512, hidden=2048, inter=512, topk=10,
                setups=[dict(T=1, R=30, window=8, launches=30, distinct_mean=10.0, distinct_min=10, distinct_max=10),
                        dict(T=8, R=6, window=1, launches=8, distinct_mean=74.5, distinct_min=70, distinct_max=78)],
                eager_min_calls=32, check_tol=0.02, notes=[], reps=20)
    return dict(meta=meta, rows=rows)


def test_finish_layer_row_never_mixes_methods():
    lay = fake_layer()
    r = next(x for x in lay["rows"] if x["T"] == 1 and x["k"] == 2)
    assert r["vs_fp16_steps"] == pytest.approx(42.0 / 13.0) and r["vs_fp16_forward"] == pytest.approx(42.0 / 33.0)
    assert r["pct_sol_steps"] == pytest.approx(100 * 4.0 / 13.0) and r["vs_fp16_forward_method"] == "graph"
    lay = fake_layer(eager=True)
    r = next(x for x in lay["rows"] if x["T"] == 1 and x["k"] == 2)
    assert r["vs_fp16_forward"] == pytest.approx(401.0 / 33.0) and r["vs_fp16_forward_method"] == "eager"
    assert r["vs_fp16_steps"] == pytest.approx(42.0 / 13.0)  # graph vs graph
    # eager kbit but no eager fp16: no ratio rather than a mixed one
    row = B.finish_layer_row(dict(moe_forward={"us": 50.0, "method": "eager"}, steps={"us": 10.0, "method": "graph"},
                                  fp16={"graph": {"us": 40.0}}, sol={"us": 4.0}))
    assert row["vs_fp16_forward"] is None and row["vs_fp16_steps"] == 4.0


def test_format_layer_table():
    md = B.format_layer_table(fake_layer())
    header = ("| T | k | experts/step | moe_forward | method | kbit steps | kbit steps+PDL | moe_route | fp16 loop | "
              "SOL | vs fp16 (moe_forward) | vs fp16 (steps) | vs fp16 (steps+PDL) | % of SOL (steps) |")
    assert md.splitlines()[0] == header
    assert "| 1 | 2 | 10.0 | 33.00 | graph | 13.00 | - | 5.00 | 42.00 | 4.00 | 1.27x | 3.23x | - | 31% |" in md
    md = B.format_layer_table(fake_layer(eager=True))
    assert "| fp16 loop (eager) |" in md.splitlines()[0]
    assert "| 1 | 2 | 10.0 | 33.00 | eager | 13.00 | - | 5.00 (eager) | 42.00 | 401.00 | 4.00 | 12.15x (eager) | 3.23x |" in md
    for ln in md.splitlines():
        assert ln.count("|") == md.splitlines()[0].count("|")
    setups = B.format_layer_setups(fake_layer())
    assert "| 1 | 30 | 8 | 30 | 10.0 (10-10) |" in setups


def test_format_report_with_moe_and_layer_only():
    res = fake_results()
    res["meta"].update(shapes=[], total_shapes=[])
    res.update(cells=[], totals=[], host_overhead=[], moe=fake_moe(), layer=fake_layer(eager=True))
    rep = B.format_report(res)
    assert rep.startswith("# kbitcupy kernel benchmark: NVIDIA H100 80GB HBM3, 2026-11-22")
    assert "## Kernel time" not in rep and "## Host overhead" not in rep  # no dense shapes in this run
    assert "## MoE expert matmuls" in rep and "## MoE layer step" in rep
    assert "TOTAL = moe_gu_fused + moe_dn" in rep and "(r x E + i) mod 512" in rep
    assert "fp16 bmm = one torch.bmm on the contiguous slice" in rep and "fp16 loop = torch with the routing given" in rep
    assert "eager = CUDA events" in rep and "| fp16 loop (eager) |" in rep


def test_main_moe_orchestration_with_fakes(tmp_path, monkeypatch):
    """main() with --shapes moe --moe-layer on the CPU, every device call faked."""
    calls = {"fp16": [], "cell": [], "sol": [], "bank": [], "lay_fp16": [], "lay_kbit": []}
    L2 = 60 << 20

    class FakeBank:
        def __init__(self, W, k):
            self.k, self.W = k, W

    def fake_time_fp16_moe(Wt, E, Ms, l2, reps):
        calls["fp16"].append((Wt, E))
        return {M: {"loop": {"us": 20.0, "check_ok": True}, "bmm": {"us": 10.0, "check_ok": True}} for M in Ms}

    def fake_cell(cols, shape, E, M, bank, dtype, l2, reps):
        assert shape.experts == E and bank.W[0] == f"W{shape.N}x{shape.K}"  # this shape's bank
        calls["cell"].append((shape.name, E, M, bank.k))
        return {c.name: {"us": 4.0 + (c.name != "Grouped"), "check_ok": True} for c in cols}

    def fake_sol(nbytes, l2, sms, reps):
        calls["sol"].append(nbytes)
        return {"us": 1.0, "bytes": nbytes}

    def fake_layer_kbit(bgu, bdn, st, I, dtype, reps, state):
        calls["lay_kbit"].append((st["T"], bgu.k))
        assert len(st["draws"]) == st["R"] and st["launches"] >= st["R"]
        eager = st["T"] == 8
        return {"steps": {"us": 10.0, "method": "graph", "check_ok": True},
                "route": {"us": 3.0, "method": "eager" if eager else "graph"},
                "moe_forward": {"us": 15.0, "method": "eager" if eager else "graph", "check_ok": True}}

    def fake_layer_fp16(Wgu, Wdn, st, I, dtype, reps, eager=False):
        calls["lay_fp16"].append((st["T"], eager))
        return {"us": 300.0 if eager else 30.0, "method": "eager" if eager else "graph", "check_ok": True}

    monkeypatch.setattr(B, "_device_info", lambda: ("NVIDIA Fake GPU", L2, 132))
    monkeypatch.setattr(B, "_versions", lambda: {"CuPy": "x", "torch": "y"})
    monkeypatch.setattr(B, "_free_pool", lambda: None)
    monkeypatch.setattr(B, "_have_torch", lambda: True)
    monkeypatch.setattr(B, "make_fp16_bank", lambda Bn, N, K, seed=0: (f"W{N}x{K}", Bn))
    monkeypatch.setattr(B, "_torch_bank", lambda W, dtype: ("torch", W))
    monkeypatch.setattr(B, "make_kbit_bank", lambda W, k: (calls["bank"].append((W, k)), FakeBank(W, k))[1])
    monkeypatch.setattr(B, "time_fp16_moe", fake_time_fp16_moe)
    monkeypatch.setattr(B, "time_moe_cell", fake_cell)
    monkeypatch.setattr(B, "time_sol", fake_sol)
    monkeypatch.setattr(B, "layer_kbit", fake_layer_kbit)
    monkeypatch.setattr(B, "layer_fp16", fake_layer_fp16)

    res = B.main(["--shapes", "moe", "--moe-M", "1,4", "--experts", "8,10", "--k", "2,4", "--moe-layer",
                  "--layer-T", "1,8", "--out", str(tmp_path), "--tag", "moe"], command="python profiling/bench.py moe")
    assert res["cells"] == [] and res["meta"]["shapes"] == []
    moe = res["moe"]
    assert len(moe["cells"]) == 3 * 2 * 2 * 2 and len(calls["cell"]) == 24
    assert len(calls["bank"]) == 3 * 2 + 2 * 2  # one kbit bank per (shape, k); layer: gu + dn per k
    assert len(calls["fp16"]) == 3 * 2  # per (shape, E), all M at once
    for c in moe["cells"]:
        per = B.kbit_expert_bytes(c["N"], c["K"], c["k"])
        assert c["weight_bytes"] == c["experts"] * per
        assert c["best"] == "Grouped" and c["vs_cublas"] == pytest.approx(10.0 / 4.0)
    assert len(moe["totals"]) == 2 * 2 * 2
    assert moe["meta"]["bank_bytes"]["moe_dn,k=2"] == 512 * B.kbit_expert_bytes(2048, 512, 2)
    lay = res["layer"]
    assert [(r["T"], r["k"]) for r in lay["rows"]] == [(1, 2), (8, 2), (1, 4), (8, 4)]
    assert sorted(set(calls["lay_fp16"])) == [(1, False), (8, False), (8, True)]  # eager fp16 only where needed
    assert len(calls["lay_fp16"]) == 3  # cached across k
    r8 = next(r for r in lay["rows"] if r["T"] == 8)
    assert r8["vs_fp16_forward"] == pytest.approx(300.0 / 15.0) and r8["vs_fp16_forward_method"] == "eager"
    assert r8["vs_fp16_steps"] == pytest.approx(30.0 / 10.0)
    assert lay["meta"]["setups"][0]["T"] == 1 and lay["meta"]["setups"][0]["window"] >= 1
    with open(res["meta"]["files"]["json"]) as f:
        back = json.load(f)
    assert len(back["moe"]["cells"]) == 24 and len(back["layer"]["rows"]) == 4
    with open(res["meta"]["files"]["md"]) as f:
        md = f.read()
    assert "## MoE expert matmuls" in md and "## MoE layer step" in md and "### MoE, M = 4 tokens per expert" in md


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
def _torch_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.mark.gpu
def test_bench_smoke_gpu(tmp_path):
    res = B.main(["--M", "1,64", "--k", "4", "--shapes", "KV", "--reps", "15", "--out", str(tmp_path), "--tag", "smoke",
                  "--plot"])
    m = res["meta"]
    assert os.path.exists(m["files"]["md"]) and os.path.exists(m["files"]["json"])
    assert len(res["cells"]) == 2 and len(res["totals"]) == 2 and len(res["host_overhead"]) == 1
    for c in res["cells"]:
        g = c["columns"]["GEMV"]  # (KV at M = 64: the token split)
        assert g["us"] > 0 and g["check_ok"], g
        assert g["R"] * c["weight_bytes"] >= 4 * m["l2_bytes"]
        for name in ("dq+cuBLAS", "matmul"):
            e = c["columns"][name]
            assert e["us"] > 0 and e["check_ok"], (name, e)
        g = c["columns"]["GEMM"]
        assert (g["us"] > 0 and g["check_ok"]) or g.get("skipped"), g  # '-' only when it does not fit
        assert c["sol"]["us"] > 0 and c["sol"]["R"] * c["sol"]["bytes"] >= 4 * m["l2_bytes"]
        # Best: the fastest kbit column measured here (any kernel column: WGMMA / STREAM tie with matmul on KV)
        kbit = {n for n, e in c["columns"].items() if n not in B.NOT_IN_BEST and e and e.get("us")}
        assert c["best"] in kbit, (c["best"], sorted(kbit))
        assert c["columns"][c["best"]]["us"] == min(c["columns"][n]["us"] for n in kbit)
        if m["versions"]["torch"] != "not installed":
            assert c["cublas"]["us"] > 0
    assert res["host_overhead"][0]["wall_us"] > 0


@pytest.mark.gpu
def test_bench_moe_smoke_gpu(tmp_path):
    """MoE tables and the layer step on a 16-expert bank of small experts (hidden options)."""
    res = B.main(["--shapes", "moe", "--moe-M", "1,4", "--experts", "4", "--k", "4", "--bank-experts", "16",
                  "--moe-hidden", "256", "--moe-inter", "128", "--moe-layer", "--layer-T", "1,4", "--topk", "4",
                  "--reps", "15", "--out", str(tmp_path), "--tag", "moe_smoke"])
    assert os.path.exists(res["meta"]["files"]["md"]) and res["cells"] == []
    moe, torch_ok = res["moe"], _torch_cuda()
    assert len(moe["cells"]) == 3 * 2 and len(moe["totals"]) == 2
    for c in moe["cells"]:
        for name in ("Grouped", "g-GEMV", "matmul loop"):  # M = 1, 4: the GEMV design; g-MMA/g-WGMMA from 8
            e = c["columns"][name]
            assert e["us"] > 0 and e["check_ok"], (c["shape"], c["M"], name, e)
        assert "g-MMA" not in c["columns"] and "g-WGMMA" not in c["columns"]
        assert c["sol"]["us"] > 0 and c["best"] in ("Grouped", "g-GEMV", "matmul loop")
        if torch_ok:
            for v in ("loop", "bmm"):
                assert c["fp16"][v]["us"] > 0 and c["fp16"][v]["check_ok"], (c["shape"], v, c["fp16"][v])
            assert c["vs_cublas"] > 0
    lay = res["layer"]
    assert [(r["T"], r["k"]) for r in lay["rows"]] == [(1, 4), (4, 4)]
    for r in lay["rows"]:
        assert r["steps"]["us"] > 0 and r["steps"]["check_ok"] and r["steps"]["method"] == "graph", r["steps"]
        mf = r["moe_forward"]
        assert mf["us"] > 0 and mf["check_ok"] and mf["method"] in ("graph", "eager"), mf
        assert mf["method"] == "graph" or mf.get("capture_error")  # an eager number always says why
        assert r["route"]["us"] > 0 and r["sol"]["us"] > 0
        if torch_ok:
            f = r["fp16"]["graph"]
            assert f["us"] > 0 and f["check_ok"], f
            assert r["vs_fp16_steps"] > 0
            if mf["method"] == "eager":
                assert r["fp16"]["eager"]["us"] > 0


def test_sass_budget_groups_by_execution_count(tmp_path, capsys):
    """profiling/sass_budget.py on an ncu source-page CSV: instructions grouped by how often each
    ran (a loop body is one group), predicated opcodes counted by their opcode."""
    path = os.path.join(os.path.dirname(HERE), "profiling", "sass_budget.py")
    spec = importlib.util.spec_from_file_location("sass_budget", path)
    sb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sb)
    rows = ['"Kernel Name","k"',
            '"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed"',
            '"0x0","LDC R1, c[0x0][0x28]","2","10"',
            '"0x10","@!P0  BRA 0x80","5","400"',
            '"0x20","IMAD R2, R3, 0x80, R4","1","400"',
            '"0x30","LDS R5, [R2]","0","400"',
            '"0x40","EXIT","0","0"']
    f = tmp_path / "src.csv"
    f.write_text("\n".join(rows) + "\n")
    data = sb.load(str(f))
    assert [d[1] for d in data] == [10, 400, 400, 400, 0]
    assert sb.opcode("@!P0  BRA 0x80") == "BRA" and sb.opcode("LDS.128 R4, [R2]") == "LDS"
    sb.main(str(f))
    out = capsys.readouterr().out
    assert "1210 warp instructions executed, 8 stall samples" in out
    assert "x400       3 instructions" in out and "BRA:1" in out and "IMAD:1" in out
