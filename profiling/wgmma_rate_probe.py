"""wgmma issue-rate probe (issue 4): how fast one SM runs wgmma.m64nNk16 with the A operand in
registers (the fused kernels' form: dequantized weights as A, tokens as the shared-memory B) for
N = 64 / 128 / 256 and 1 / 2 warpgroups per CTA, one CTA per SM on every SM, 4 k16 per group,
wait_group 1 between groups (the kernels' pipelining).  Prints TFLOPS and FMA per clock per SM
against the 2048 dense fp16 FMA / clk / SM of an H100 SXM.

usage (GPU machine): python3 profiling/wgmma_rate_probe.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

from kbitcupy import _compile as C  # noqa: E402


def wgmma_asm(n):
    nd = n // 2
    acc = ",".join(f"%{i}" for i in range(nd))
    return (f'"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nd + 5}, 0;\\n'
            f'wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {{{acc}}}, {{%{nd},%{nd + 1},%{nd + 2},%{nd + 3}}}, '
            f'%{nd + 4}, p, 1, 1, 0;\\n}}\\n"')


def source():
    parts = [
             "__device__ __forceinline__ unsigned long long sdesc(unsigned s) {",
             "  return (unsigned long long)((s & 0x3FFFFu) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62); }"]
    for n in (64, 128, 256):
        nd = n // 2
        outs = ", ".join(f'"+f"(d[{i}])' for i in range(nd))
        parts.append(f"__device__ __forceinline__ void mma_n{n}(float (&d)[{nd}], const unsigned (&a)[4], unsigned long long b, int sc) {{\n"
                     f"  asm volatile({wgmma_asm(n)} : {outs} : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(b), \"r\"(sc));\n}}")
    parts.append(r'''
template <int N, int SUB, int ROT, bool AMOD>
__global__ void __launch_bounds__(256, 1) wg_rate(float* out, int iters, int randb) {
    // SUB sub-MMAs of width N per k16 (N x SUB tokens), 4 k16 per group; every warpgroup of the CTA.
    // ROT: B from ROT stage buffers in turn (the kernels' pipeline); randb: B holds random halves
    // in [-1, 1) instead of zeros (the tensor cores' power draw); AMOD: two A fragment sets, the one
    // the retired group read rewritten each iteration (the kernels' dequantize into the other set).
    extern __shared__ __align__(1024) unsigned char smem[];
    constexpr int SB = N * SUB * 128;  // bytes of one B stage
    const unsigned s0 = ((unsigned)__cvta_generic_to_shared(smem) + 1023u) & ~1023u;
    unsigned char* b = smem + (s0 - (unsigned)__cvta_generic_to_shared(smem));
    for (int i = threadIdx.x; i < ROT * SB / 4; i += blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ (blockIdx.x * 40503u);
        h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
        // two halves with exponent 14 (values in [0.5, 2)) and random signs / mantissas, or zeros
        const unsigned v = (h & 0x83FF83FFu) | 0x38003800u;
        reinterpret_cast<unsigned*>(b)[i] = randb ? v : 0u;
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    unsigned a[2][4];
#pragma unroll
    for (int q = 0; q < 2; q++)
#pragma unroll
        for (int r = 0; r < 4; r++) a[q][r] = 0x3C003C00u ^ ((threadIdx.x * 7u + r + 5u * q) & 0x83FF83FFu);
    float d[SUB][N / 2];
#pragma unroll
    for (int s = 0; s < SUB; s++)
#pragma unroll
        for (int i = 0; i < N / 2; i++) d[s][i] = 0.f;
    // (two fragment sets in turn, named statically: a runtime set index made ptxas serialize the wgmma)
    auto step = [&](int it, unsigned (&cur)[4], unsigned (&nxt)[4]) {
        const unsigned sb = s0 + (unsigned)((it % ROT) * SB);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int s = 0; s < SUB; s++) {
                const unsigned ad = sb + 32u * j + 8192u * s * (N / 64);
                if (N == 64) mma_n64(*reinterpret_cast<float(*)[32]>(&d[s][0]), cur, sdesc(ad), 1);
                if (N == 128) mma_n128(*reinterpret_cast<float(*)[64]>(&d[s][0]), cur, sdesc(ad), 1);
                if (N == 256) mma_n256(*reinterpret_cast<float(*)[128]>(&d[s][0]), cur, sdesc(ad), 1);
            }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        if (AMOD) {  // the set the retired group read: new values (a few ALU ops, as a dequantize's last step)
            asm volatile("" ::"r"(nxt[0]), "r"(nxt[1]), "r"(nxt[2]), "r"(nxt[3]) : "memory");
#pragma unroll
            for (int r = 0; r < 4; r++) nxt[r] = (nxt[r] ^ ((unsigned)it * 0x00010001u)) & 0xBFFFBFFFu;
        }
    };
    for (int it = 0; it < iters; it += 2) {
        step(it, a[0], AMOD ? a[1] : a[0]);
        step(it + 1, AMOD ? a[1] : a[0], a[0]);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    float s = 0.f;
#pragma unroll
    for (int q = 0; q < SUB; q++)
#pragma unroll
        for (int i = 0; i < N / 2; i++) s += d[q][i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
''')
    return "\n".join(parts)


def build(source_text, fname, names, extra=()):
    """NVRTC-compile source_text for sm_90a with the name expressions `names`, load the cubin: (RawModule,
    {name: lowered name}, program log).  The probes' common set-up (wgmma_lds_probe.py uses it too)."""
    nvrtc = C._nvrtc()
    prog = nvrtc.createProgram(source_text, fname, [], [])
    for nm in names:
        nvrtc.addNameExpression(prog, nm)
    opts = list(C._options(())) + ["-arch=sm_90a", *extra]
    try:
        nvrtc.compileProgram(prog, opts)
    except Exception:
        print(nvrtc.getProgramLog(prog))
        raise
    log = nvrtc.getProgramLog(prog)
    lowered = {nm: nvrtc.getLoweredName(prog, nm) for nm in names}
    path = f"/tmp/{fname}.cubin"
    open(path, "wb").write(nvrtc.getCUBIN(prog))
    return cp.RawModule(path=path), lowered, log


def main():
    # (N, SUB, ROT, AMOD, randb): the earlier cases, then the kernels' form step by step (m64n64 x 2, 2
    # warpgroups: TOK = 128) -- random B, 6 rotating stages, A rewritten each iteration, all of them
    cases = [(64, 1, 1, False, 0), (64, 2, 1, False, 0), (128, 1, 1, False, 0), (256, 1, 1, False, 0),
             (64, 2, 1, False, 1), (64, 2, 6, False, 0), (64, 2, 1, True, 0), (64, 2, 6, True, 1),
             (128, 1, 6, True, 1)]
    names = sorted({f"wg_rate<{n}, {s}, {r}, {str(a).lower()}>" for n, s, r, a, _ in cases})
    mod, lowered, _ = build(source(), "wg_rate.cu", names)
    dev = cp.cuda.Device()
    sms = dev.attributes["MultiProcessorCount"]
    clk = cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrClockRate, 0) * 1e3
    out = cp.zeros(sms * 256, cp.float32)
    iters = 4000
    print(f"# {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, {sms} SMs, nominal clock {clk / 1e9:.2f} GHz")
    for (n, sub, rot, amod, randb) in cases:
        for wgs in (1, 2):
            fn = mod.get_function(lowered[f"wg_rate<{n}, {sub}, {rot}, {str(amod).lower()}>"])
            smem = n * sub * 128 * rot + 1024
            fn.max_dynamic_shared_size_bytes = smem
            args = (out, cp.int32(iters), cp.int32(randb))
            fn((sms,), (128 * wgs,), args, shared_mem=smem)
            cp.cuda.runtime.deviceSynchronize()
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record()
            for _ in range(5):
                fn((sms,), (128 * wgs,), args, shared_mem=smem)
            e1.record()
            e1.synchronize()
            t = cp.cuda.get_elapsed_time(e0, e1) / 5 * 1e-3
            fma = sms * wgs * iters * 4 * sub * 64 * n * 16
            print(f"m64n{n}k16 x {sub} per k16, B {'random' if randb else 'zero'}, {rot} B stage(s), A "
                  f"{'rewritten' if amod else 'fixed'}, {wgs} warpgroup(s): {2 * fma / t / 1e12:7.1f} TFLOPS, "
                  f"{fma / t / sms / clk:7.0f} FMA/clk/SM at the nominal clock ({t * 1e6:.0f} us)")


if __name__ == "__main__":
    main()
