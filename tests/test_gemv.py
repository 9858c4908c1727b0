"""CPU tests of the decode GEMV's launch plans (kbitcupy.gemv.plan, grouped_plan) and the
grouped-kernel choice: the measured rules, and the invariants the kernels rely on."""
import numpy as np
import pytest

from kbitcupy import gemv as G
from kbitcupy.grouped import use_grouped_gemv

SMEM_LIMIT = 227 * 1024
DENSE = {"gateup": (5120, 2048), "down": (2048, 5120), "Q": (4096, 2048), "O": (2048, 4096), "KV": (512, 2048),
         "lin_key": (2048, 2048), "lin_value": (4096, 2048)}


@pytest.mark.parametrize("k", [2, 3, 4, 5])
@pytest.mark.parametrize("M", [1, 2, 3, 4, 8, 9, 16, 17, 24, 32])
@pytest.mark.parametrize("shape", list(DENSE))
def test_plan_invariants(k, M, shape):
    N, K = DENSE[shape]
    if k == 5 and M > 16:  # four token tiles are not instantiated at k = 5 (gemv refuses; fits() is False)
        assert not any(len(key) == 11 and key[0] == 5 and key[5] == 4 for key in G.GEMV.instances)
        return
    for c8 in (None, False, True) if M <= 4 else (None,):  # the default, or 8-column groups forced either way
        warps, depth, smem, grid, tiles, dual, late, gpb, c8, ty = G.plan(N, K, M, k, c8=c8)
        cols, step = (8, 256) if c8 else (16, 128)
        # the token split (plan ts): KV (32 groups) from M = 5, 4 rows a CTA at M <= 8 (c8), else 8
        ts = shape == "KV" and M >= 5  # (c8 is only forced at M <= 4)
        assert ty == (-(-M // (4 if M <= 8 else 8)) if ts else 1)
        Mc = min(M, 4 if M <= 8 else 8) if ts else M  # a CTA's rows
        assert grid == -(-N // (cols * gpb)) and tiles == (1 if Mc <= 8 else 2 if Mc <= 16 else 4)
        if tiles == 4:  # one chain (the second spills), a 256-thread bound with one group a block (KBIT_GEMV_BOUNDS)
            assert not dual and (gpb > 1 or warps <= 8)
        assert depth in G.DEPTHS or (depth == 3 and c8 and M == 1 and k in (3, 4) and K >= 4096)  # (gemv._depth3)
        assert 1 <= gpb and warps * gpb <= 16  # the kernel's 512-thread launch bound
        # (more warps than steps only in the M = 4 one-group-per-SM plan, whose idle warps stage A: gemv.plan)
        assert warps in (4, 8, 16) and (warps <= -(-K // step) or (c8 and M == 4 and warps == 16))
        assert not (late and tiles > 1)  # LATE is only instantiated for one token tile
        assert not (dual and k == 5)      # k = 5: one chain (measured)
        assert not c8 or (Mc <= 4 and gpb == 1)
        assert smem == G.table_bytes(k, tiles) + Mc * -(-K // step) * step * 2 + gpb * warps * 128 * tiles * 4 + 128
        for cbd in (False, True):  # the codebook loaded, or the default one compiled in
            key = (k, "float16", "uint8", True, depth, tiles, dual, late, gpb > 1, cbd, c8) + (("ts",) if ty > 1 else ())
            assert key in G.GEMV.instances  # every plan names a compiled instantiation


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_token_split_past_32_rows(k):
    """The token split (few column groups, the tiled layout) takes M up to max_rows (GEMV_TS_MAX_M): ceil(M / 8) CTAs
    a group of one token tile, 8 warps past 32 rows (two CTAs an SM: run53.sh ts8); every other plan stops at 32 rows
    (16 at k = 5) with a clear error."""
    mr = G.max_rows(k, 512)
    assert mr == 128 and G.max_rows(k, 1024) == mr and G.max_rows(k, 1040) == G.max_rows(k) == (16 if k == 5 else 32)
    assert G.max_rows(k, 512, tiled=False) == G.max_rows(k)
    for N, K in ((512, 2048), (1000, 2112), (24, 32)):
        for M in (33, 48, 64, 100, mr):
            warps, depth, smem, grid, tiles, dual, late, gpb, c8, ty = G.plan(N, K, M, k)
            assert ty == -(-M // 8) and tiles == 1 and gpb == 1 and not c8 and warps == min(8, -(-K // 128))
            assert G.plan(N, K, M, k, ts=True) == G.plan(N, K, M, k)  # (named or by the rule: the same plan)
            assert smem == G.table_bytes(k, 1) + 8 * -(-K // 128) * 128 * 2 + warps * 128 * 4 + 128
            key = (k, "float16", "uint8", True, depth, tiles, dual, late, False, True, c8, "ts")
            assert key in G.GEMV.instances
    for kw in ({"warps": 8}, {"tiled": False}, {"ts": False}):
        with pytest.raises(ValueError, match="token split"):
            G.plan(512, 2048, 33, k, **kw)
    with pytest.raises(ValueError, match="token split"):
        G.plan(2048, 2048, 33, k)


def test_c8_plan_only_where_instantiated():
    # 8-column groups: one token tile (M <= 4), the tiled layout, one group per block
    for M, kw in ((5, {}), (1, {"tiled": False}), (1, {"gpb": 2})):
        with pytest.raises(ValueError, match="c8"):
            G.plan(*DENSE["gateup"], M, 4, c8=True, **kw)
    assert not any(key[-1] for key in G.GEMV.instances if len(key) == 11 and (key[5] > 1 or not key[3] or key[8]))
    # gate/up's 640 half-width groups: 4-warp blocks (six per SM resident); down's 256: 8 warps
    # the measured rule (H100, c8ab22 / c8ab22b): KV at every M <= 4 and k; at M = 1 gate/up k = 4 and
    # the 128-group shapes at k = 3 (and k = 4 with K >= 4096); never Q / linear value, M > 4
    c8 = {(s, k, M) for s in DENSE for k in (2, 3, 4, 5) for M in range(1, 9) if G.plan(*DENSE[s], M, k)[8]}
    # (KV at M = 5..8: the token split's 4-row CTAs, run42 ts)
    assert c8 == ({("KV", k, M) for k in (2, 3, 4, 5) for M in range(1, 9)}
                  | {("gateup", 4, 1), ("down", 3, 1), ("O", 3, 1), ("lin_key", 3, 1), ("down", 4, 1), ("O", 4, 1)})
    assert all(G.plan(*DENSE["KV"], M, k)[9] == (1 if M <= 4 else 2) for k in (2, 3, 4, 5) for M in range(1, 17))
    assert G.plan(*DENSE["KV"], 8, 4)[0] == 8 and G.plan(*DENSE["KV"], 16, 4)[0] == 16
    # not where the caller fixes the block or the layout, nor with 128 groups (linear key / O lost that way)
    assert G.plan(*DENSE["KV"], 8, 4, warps=16)[9] == 1 and G.plan(*DENSE["KV"], 8, 4, tiled=False)[9] == 1
    assert G.plan(*DENSE["lin_key"], 8, 4)[9] == 1 and G.plan(*DENSE["O"], 16, 4)[9] == 1
    for bad in ({"tiled": False}, {"gpb": 2}):
        with pytest.raises(ValueError, match="token split"):
            G.plan(*DENSE["KV"], 8, 5, ts=True, **bad)
    assert not G.plan(*DENSE["KV"], 1, 4, tiled=False)[8] and not G.plan(*DENSE["KV"], 1, 4, warps=8)[8]
    assert G.plan(*DENSE["gateup"], 1, 4, c8=True)[0:4:3] == (4, 640)
    assert G.plan(*DENSE["down"], 1, 4, c8=True)[0:4:3] == (8, 256)


def test_late_fill_plan():
    # the ring's late fill (plan late: steps after step 0 requested once it landed) wherever a warp has two or
    # more steps at M <= 4, the 16-column gate/up at k = 3 / 4 included (H200, run58.sh knobs / k3m2); at M = 5..8
    # not where three 256-thread blocks share an SM (gate/up k = 3 / 4 M = 8 slower with it)
    for k in (3, 4):
        for M in (1, 2, 3, 4):
            warps, _, _, grid, tiles, _, late, _, c8, _ = G.plan(*DENSE["gateup"], M, k)
            assert late and tiles == 1 and (c8 == (k == 4 and M == 1)), (k, M)
            assert G.plan(*DENSE["gateup"], M, k, tiled=False)[6], (k, M)  # the flat layout's 16 columns too
        assert not G.plan(*DENSE["gateup"], 8, k)[6]
    assert G.plan(*DENSE["gateup"], 8, 2)[6]  # (k = 2: two blocks per SM either way)


def test_two_tile_warps_plan():
    # two token tiles on <= 132 groups: 16 warps, but 8 where K has <= 16 steps of 128 (linear key; run58.sh knobs2)
    for M in (9, 12, 16):
        assert G.plan(*DENSE["lin_key"], M, 4)[0] == 8 and G.plan(*DENSE["lin_key"], M, 2)[0] == 8
        assert G.plan(*DENSE["down"], M, 4)[0] == 16 and G.plan(*DENSE["O"], M, 4)[0] == 16
    assert G.plan(*DENSE["lin_key"], 8, 4)[0] == 16 and G.plan(*DENSE["lin_key"], 20, 4)[0] == 8


def test_safe_prefetch_steps():
    # safe PDL's L2 prefetch before the wait (H100, pf23c / pf23da): one ring step at M = 1..4
    # except on gate/up-wide shapes (>= 320 groups of 16 columns) and, above M = 1, down-like
    # ones (K >= 5120); the whole ring otherwise (and above M = 4)
    for M in (1, 2, 3, 4, 8, 16):
        one = {(s, k) for s in DENSE for k in (2, 3, 4, 5)
               if G.safe_prefetch_steps(*DENSE[s], M, G.plan(*DENSE[s], M, k)[1]) == 1}
        want = set() if M > 4 else {s for s in DENSE if s != "gateup" and (M == 1 or s != "down")}
        assert one == {(s, k) for s in want for k in (2, 3, 4, 5)}, M
        for s in DENSE:
            d = G.plan(*DENSE[s], M, 4)[1]
            assert G.safe_prefetch_steps(*DENSE[s], M, d) in (1, d)
    # the H200 (run58.sh knobs / knobs2): one step at every M <= 8 but on gate/up-wide shapes
    for M in (1, 2, 3, 4, 5, 8, 9, 16):
        one = {s for s in DENSE if G.safe_prefetch_steps(*DENSE[s], M, 2, "H200") == 1}
        assert one == (set() if M > 8 else set(DENSE) - {"gateup"}), M
    assert G.safe_prefetch_steps(*DENSE["down"], 2, 2, "H100") == 2 and G.safe_prefetch_steps(*DENSE["Q"], 6, 2) == 2


# H100 / H200 limits (kbitcupy.gemm.device_info)
_HOPPER = dict(sms=132, smem_sm=233472, smem_block=232448, smem_reserved=1024)


@pytest.mark.parametrize("blocks,per_sm", [(256, 3), (256, 5), (320, 4), (400, 8), (640, 6)])
def test_resident_cap_pads_to_the_even_share(blocks, per_sm):
    cap = -(-blocks // 132)
    smem = G.resident_cap_smem(4096, blocks, per_sm, _HOPPER)
    assert smem > 4096 and smem % 16 == 0 and smem <= _HOPPER["smem_block"]
    # the SM's shared memory now holds exactly the even share of blocks
    assert _HOPPER["smem_sm"] // (smem + _HOPPER["smem_reserved"]) == cap


@pytest.mark.parametrize("blocks,per_sm,smem", [(256, 2, 4096), (128, 4, 4096), (64, 3, 40000), (640, 5, 39040),
                                                (2000, 4, 4096)])
def test_resident_cap_leaves_even_or_multiwave_grids(blocks, per_sm, smem):
    # already at most the even share, one block an SM, or several waves: unchanged
    assert G.resident_cap_smem(smem, blocks, per_sm, _HOPPER) == smem


def test_k5_wide_shapes_put_an_sms_share_of_groups_in_one_block():
    # k = 5: gate/up's 320 groups as 107 blocks of 3 x 4 warps, Q's 256 as 128 blocks of 2 x 8
    # (one pair table per SM), at one token tile; k = 4 and the narrow shapes one group per block
    for M in (1, 2, 4, 8):
        warps, _, smem, grid, _, _, _, gpb, _, _ = G.plan(*DENSE["gateup"], M, 5)
        assert (warps, gpb, grid) == (4, 3, 107) and smem <= SMEM_LIMIT
        warps, _, smem, grid, _, _, _, gpb, _, _ = G.plan(*DENSE["Q"], M, 5)
        assert (warps, gpb, grid) == (8, 2, 128) and smem <= SMEM_LIMIT
    assert G.plan(*DENSE["gateup"], 9, 5)[7] == 1  # two token tiles: not instantiated with slices
    # launched with PDL, M <= 2 keeps one group per block (the table build overlaps the previous kernel)
    assert G.plan(*DENSE["gateup"], 2, 5, pdl=True)[::7] == (4, 1) and G.plan(*DENSE["Q"], 1, 5, pdl=True)[7] == 1
    assert G.plan(*DENSE["gateup"], 4, 5, pdl=True)[7] == 3
    assert G.plan(*DENSE["gateup"], 1, 4)[7] == 1 and G.plan(*DENSE["gateup"], 4, 4)[0] == 8
    assert G.plan(*DENSE["down"], 1, 5)[7] == 1 and G.plan(*DENSE["KV"], 1, 5)[7] == 1
    assert G.plan(*DENSE["gateup"], 1, 5, warps=8)[7] == 1  # a warps override keeps one group
    with pytest.raises(ValueError, match="512 threads"):
        G.plan(*DENSE["gateup"], 1, 5, warps=8, gpb=3)


def test_grouped_plan_fewest_groups_per_block_in_one_wave():
    # the group loop (gpb = 0): down: 128 groups per expert; gate/up fused: 64
    loop = dict(gpb=0)
    assert G.grouped_plan(2048, 512, 4, 8, 1, resident=528, **loop)[1] == 64   # 2 groups per block: 512 blocks
    assert G.grouped_plan(2048, 512, 4, 10, 1, resident=528, **loop)[1] == 43  # 3 per block: 430 blocks
    assert G.grouped_plan(1024, 2048, 4, 8, 1, resident=264, **loop)[1] == 32
    assert G.grouped_plan(1024, 2048, 4, 10, 1, resident=264, **loop)[1] == 22
    assert G.grouped_plan(1024, 2048, 4, 1, 1, resident=264)[1] == 64  # one slot: one group per block
    assert G.grouped_plan(2048, 512, 4, 512, 1, resident=528, **loop)[1] == 32  # every expert: at most 4 per block
    for slots in (1, 3, 8, 10, 64, 512):
        warps, gx, smem, tiles, gpb = G.grouped_plan(1024, 2048, 4, slots, 4, resident=264, **loop)
        per = -(-64 // gx)
        assert 1 <= per <= 4 and gx * per >= 64 and (slots * gx <= 264 or per == 4) and gpb == 0
    assert G.grouped_plan(1024, 2048, 4, 8, 1, per_block=1)[1:5:3] == (64, 0)  # override: the loop


def test_grouped_plan_an_sms_share_side_by_side():
    # <= 8 tokens, 2..16 groups per SM over all slots: that many groups side by side in one block
    # (16 warps in all; 3 x 4), one block per SM, or for a share of 4 or 8 half of it per block, two
    # blocks per SM (measured), and for a share of 10 at k = 4 with K of 4 steps (10 experts' down) two
    # blocks of 5 x 2 warps (the 96-register kernel); one group per SM: the group loop
    for (N, K), E, want in (((1024, 2048), 8, (2, 4)), ((1024, 2048), 10, (5, 3)), ((2048, 512), 8, (4, 2)),
                            ((2048, 512), 10, (5, 2)), ((512, 2048), 10, (3, 4)), ((512, 2048), 8, (2, 8))):
        warps, gx, smem, tiles, gpb = G.grouped_plan(N, K, 4, E, 1)
        share = -(-(N // 16) * E // 132)
        per_sm = 2 if share in (4, 8, 10) else 1
        assert (gpb, warps) == want and gx == -(-(N // 16) // gpb) and gx * E <= per_sm * 132 and tiles == 1
        assert warps * gpb <= 16 and smem == G.smem_bytes(4, 1, -(-K // 128), warps * gpb, 1)
    assert G.grouped_plan(512, 2048, 4, 4, 1)[4] == 0      # 128 groups: one per SM, the loop
    # several waves (more than 16 groups per SM, or a share whose blocks overflow one wave): small
    # blocks, several per SM: gate/up (K of 8 or more steps) 4 x 2 warps, 8 x 1 from 48 groups per SM
    # on; down 4 x 1 (8 x 1 at k = 5)
    assert G.grouped_plan(1024, 2048, 4, 74, 1)[4::-4] == (4, 2)
    assert G.grouped_plan(1024, 2048, 2, 74, 1)[4::-4] == (4, 1)  # k = 2: 4-warp blocks (five per SM)
    assert G.grouped_plan(1024, 2048, 3, 74, 1)[4::-4] == (4, 2)
    assert G.grouped_plan(1024, 2048, 4, 242, 1)[4::-4] == (8, 1)
    assert G.grouped_plan(2048, 512, 4, 74, 1)[4::-4] == (4, 1)
    assert G.grouped_plan(2048, 512, 5, 74, 1)[4::-4] == (8, 1)
    # 14 experts' down: a share of 14 one-warp groups is ceil(128 / 14) = 10 blocks a slot, 140 blocks of
    # 14 warps on 132 SMs (a second wave); 20 experts' gate/up: 7 x 20 blocks of 10 warps
    assert G.grouped_plan(2048, 512, 4, 14, 1)[4::-4] == (4, 1)
    assert G.grouped_plan(1024, 2048, 4, 20, 1)[4::-4] == (4, 2)
    # the 96-register kernel: 4-warp blocks over several waves at k = 2, 4 only
    key = lambda k, E, N=2048, K=512: G.grouped_kernel_key(k, "float16", 0, False, G.grouped_plan(N, K, k, E, 1), E)[0]
    assert key(4, 74) == key(2, 74) == key(2, 74, 1024, 2048) == "grouped_slw"
    assert key(5, 74) == key(3, 74) == key(4, 74, 1024, 2048) == key(4, 8) == "grouped_sl"
    # ... and 10 experts' down at k = 4 (two 10-warp blocks per SM fit its registers, not the 128-register
    # kernel's); not at 8 tokens, nor at k = 2 (the quad table), nor with K of 8 steps
    assert key(4, 10) == "grouped_slw" and G.grouped_plan(2048, 512, 4, 10, 8)[4::-4] == (10, 1)
    assert G.grouped_plan(2048, 512, 2, 10, 1)[4::-4] == (10, 1) and G.grouped_plan(2048, 1024, 4, 10, 1)[4::-4] == (10, 1)
    assert G.grouped_kernel_key(4, "float16", 1, False, G.grouped_plan(2048, 512, 4, 1, 1), 1)[0] == "grouped_fused"
    # every grouped kernel has its LB instantiation (the wait-first launch's): the same arguments, CBD spelled
    # out, LB = true
    kinds = [key for key in G.GEMV.instances if key[0] in G.GROUPED_KINDS]
    assert kinds and len([k for k in G.GEMV.instances if str(k[0]).endswith("_lb")]) == len(kinds)
    for key in kinds:
        name, lb = G.GEMV.instances[key], G.GEMV.instances[G.lb_key(key)]
        args, lb_args = name[name.index("<") + 1:-1].split(", "), lb[lb.index("<") + 1:-1].split(", ")
        assert lb.split("<")[0] == name.split("<")[0] and lb_args[:4] == args[:4]
        assert lb_args[4:] == ["true" if key[-1] else "false", "true"] and args[4:] == (["true"] if key[-1] else [])
    for (N, K) in ((1024, 2048), (2048, 512)):
        for E in range(1, 40):
            warps, gx, smem, tiles, gpb = G.grouped_plan(N, K, 4, E, 1)
            share = -(-(N // 16) * E // 132)
            if 2 <= share <= 16 and gpb == share or gpb * 2 == share:  # the share plan: one wave (the 96-register
                slw = G.grouped_kernel_key(4, "float16", 0, False, (warps, gx, smem, tiles, gpb), E)[0] == "grouped_slw"
                assert gx * E <= max(1, (20 if slw else 16) // (gpb * warps)) * 132  # kernel: 20 warps an SM)
            assert warps * gpb <= 16
    # two token tiles (9..16 tokens, k <= 4): the share side by side where its grid is one wave (one group more a
    # block where the share's overflows), at least two K steps a warp; else (k = 5, a share of 1 or over 16) the loop
    for (N, K), E, want in (((1024, 2048), 4, (2, 8)), ((1024, 2048), 8, (4, 4)), ((1024, 2048), 10, (5, 3)),
                            ((1024, 2048), 16, (8, 2)), ((2048, 512), 4, (4, 2)), ((2048, 512), 8, (8, 2)),
                            ((2048, 512), 9, (10, 1)), ((2048, 512), 10, (10, 1)), ((2048, 512), 16, (16, 1))):
        for M in (9, 12, 16):
            warps, gx, smem, tiles, gpb = G.grouped_plan(N, K, 4, E, M)
            assert (gpb, warps, tiles) == want + (2,) and gx == -(-(N // 16) // gpb) and gx * E <= 132
            assert smem == G.smem_bytes(4, M, -(-K // 128), warps * gpb, 2)
            assert G.grouped_kernel_key(4, "float16", 0, False, (warps, gx, smem, tiles, gpb), E)[0] == "grouped_sl"
    assert G.grouped_plan(1024, 2048, 5, 8, 12)[4] == 0     # k = 5: no two-tile slices kernel
    assert G.grouped_plan(2048, 512, 4, 1, 16)[4] == 0      # a share of one group an SM
    assert G.grouped_plan(2048, 512, 4, 20, 16)[4] == 0     # a share over 16
    assert G.grouped_plan(1024, 2048, 4, 8, 12, gpb=0)[4] == 0  # override: the loop
    assert G.grouped_plan(1024, 2048, 4, 8, 1, sms=264)[4] == 2  # a share per SM of the device
    assert G.grouped_plan(1024, 2048, 4, 6, 1, sms=96)[4] == 2  # share 4: two blocks per SM
    assert G.grouped_plan(1024, 2048, 4, 8, 8)[4] == 4 and G.grouped_plan(2048, 512, 4, 8, 8)[4] == 4  # 8 tokens
    with pytest.raises(ValueError, match="512 threads"):
        G.grouped_plan(1024, 2048, 4, 8, 1, gpb=4, warps=8)


def test_grouped_kernel_choice():
    assert use_grouped_gemv(1, 512) and use_grouped_gemv(8, 512) and use_grouped_gemv(8, 2048)
    assert use_grouped_gemv(16, 2048) and not use_grouped_gemv(16, 512)  # down: the grouped MMA kernel
    assert not use_grouped_gemv(17, 2048)


@pytest.mark.parametrize("seed", range(4))
def test_grouped_plan_invariants(seed):
    """Any slots / groups / tokens: the block fits the kernels' 512 threads, the blocks of a slot
    cover its groups, and at two token tiles the slices plan only in one wave, at k <= 4, within the shared memory."""
    rng = np.random.default_rng(seed)
    for _ in range(300):
        N = int(rng.integers(1, 4096))
        K = 32 * int(rng.integers(1, 128))
        slots, mt = int(rng.integers(1, 600)), int(rng.integers(1, 17))
        warps, gx, smem, tiles, gpb = G.grouped_plan(N, K, 4, slots, mt)
        groups = -(-N // 16)
        assert 1 <= warps and warps * max(gpb, 1) <= 16 and tiles == (1 if mt <= 8 else 2)
        assert gx * max(gpb, 1) >= groups if gpb else 1 <= -(-groups // gx) <= 4
        if gpb and tiles == 2:
            assert slots * gx <= 132 * max(1, 16 // (gpb * warps)) and 2 * warps <= max(2, -(-K // 128))
            assert smem <= 227 * 1024 and G.grouped_plan(N, K, 5, slots, mt)[4] == 0
        # A staged for at most max_tokens rows a pass
        assert smem == G.smem_bytes(4, min(8 * tiles, mt), -(-K // 128), warps * max(gpb, 1), tiles)


def test_quad_table_layout():
    """A NumPy model of the k = 2 quad table (cuda_src/kbit_pairlut.cuh: quad_keys, build_quad_lut, chunk_levels):
    byte r of key word h, looked up, gives the levels of elements 8r + 4h .. 8r + 4h + 3 of the block in the order
    the MMA fragment takes them (pairs q = 2h, 2h + 1).  Random indices and codebook each run."""
    from kbitcupy import reference as R

    rng = np.random.default_rng()
    cb = rng.standard_normal(4).astype(np.float32)
    idx = rng.integers(0, 4, size=(64, 32))
    words = R.pack_bitplanes(idx, 2).reshape(-1, 2)
    assert (R.unpack_bitplanes(words.reshape(-1), 2) == idx).all()

    def deint_even(x):  # bits 0, 2, 4, ... -> 0, 1, 2, ...
        x &= 0x55555555
        x = (x | (x >> 1)) & 0x33333333
        x = (x | (x >> 2)) & 0x0F0F0F0F
        return (x | (x >> 4)) & 0x00FF00FF

    pair = lambda p: (cb[deint_even(p)], cb[deint_even(p >> 1)])  # noqa: E731  (build_pair_lut's entry)
    table = [pair(e & 15) + pair(e >> 4) for e in range(256)]      # build_quad_lut's entry: lo pair, hi pair
    E2 = 0x33333333
    for (p0, p1), want in zip(words.astype(np.int64), idx):
        wa = (p0 & E2) | ((p1 & E2) << 2) & 0xFFFFFFFF
        wb = ((p0 >> 2) & E2) | (p1 & ~E2 & 0xFFFFFFFF)
        q = [(wa & 0x0F0F0F0F) | ((wb & 0x0F0F0F0F) << 4), ((wa >> 4) & 0x0F0F0F0F) | (wb & 0xF0F0F0F0)]
        for r in range(4):
            for h in range(2):
                got = table[(q[h] >> (8 * r)) & 0xFF]
                assert got == tuple(cb[want[8 * r + 4 * h + j]] for j in range(4)), (r, h)


def test_quad_table_rule():
    """The host plans the table the kernels build: the quad table (32 KB) at k = 2 with one token tile, not in the
    several-wave grouped kernel (kbit_gemv_grouped_slw) and not at two tiles."""
    from kbitcupy._compile import GEMV_Q2

    if not GEMV_Q2:
        pytest.skip("KBIT_GEMV_Q2=0: the pair table everywhere")
    assert G.table_bytes(2, 1) == 256 * 16 * 8 and G.table_bytes(2, 2) == G.lut_bytes(2)
    assert G.table_bytes(2, 1, slw=True) == G.lut_bytes(2) and G.table_bytes(4, 1) == G.lut_bytes(4)
    # 32 experts' down at 1 token: several waves of 4-warp blocks -> slw, the pair table
    p = G.grouped_plan(2048, 512, 2, 32, 1)
    key = G.grouped_kernel_key(2, "float16", 0, False, p, 32)
    assert key[0] == "grouped_slw" and p[2] == G.smem_bytes(2, 1, 4, p[0] * p[4], 1, slw=True)
    # 8 experts' gate/up (slices, one wave) -> the quad table
    p = G.grouped_plan(1024, 2048, 2, 8, 1)
    assert G.grouped_kernel_key(2, "float16", 0, False, p, 8)[0] == "grouped_sl"
    assert p[2] >= G.table_bytes(2, 1) + 2048 * 2


def test_grouped_swiglu_per_thread():
    """SwiGLU evaluations a thread makes per pass with SwiGLU fused into down's staging (moe_forward's fusion rule,
    kbitcupy.moe.SWIGLU_FUSE_MAX_PER_THREAD): rows x K / the plan's threads -- the cells run50.sh paths2 measured."""
    from kbitcupy.gemv import grouped_swiglu_per_thread as per_thread
    from kbitcupy.moe import SWIGLU_FUSE_MAX_PER_THREAD as bound

    cells = {(4, 9): 18.0, (4, 16): 32.0, (8, 16): 16.0, (10, 9): 14.4, (10, 12): 19.2, (10, 16): 25.6, (16, 16): 16.0,
             (10, 1): 1.6, (8, 8): 16.0}
    for (E, M), want in cells.items():
        assert per_thread(2048, 512, 4, E, M, 132) == pytest.approx(want), (E, M)
    # measured faster unfused: 4 experts at 9..16 tokens, 10 at 12 / 16; fused: 8 / 16 experts, 10 at 9
    assert [per_thread(2048, 512, 4, E, M, 132) <= bound for E, M in ((4, 9), (10, 12), (10, 16), (8, 16), (16, 16),
                                                                      (10, 9))] == [False] * 3 + [True] * 3
