"""CPU tests of the decode GEMV's launch plans (kbitcupy.gemv.plan, grouped_plan) and the
grouped-kernel choice: the measured rules, and the invariants the kernels rely on."""
import pytest

from kbitcupy import gemv as G
from kbitcupy.grouped import use_grouped_gemv

SMEM_LIMIT = 227 * 1024
DENSE = {"gateup": (5120, 2048), "down": (2048, 5120), "Q": (4096, 2048), "O": (2048, 4096), "KV": (512, 2048),
         "lin_key": (2048, 2048), "lin_value": (4096, 2048)}


@pytest.mark.parametrize("k", [2, 3, 4, 5])
@pytest.mark.parametrize("M", [1, 2, 3, 4, 8, 9, 16])
@pytest.mark.parametrize("shape", list(DENSE))
def test_plan_invariants(k, M, shape):
    N, K = DENSE[shape]
    warps, depth, smem, grid, tiles, dual, late = G.plan(N, K, M, k)
    assert grid == -(-N // 16) and depth in G.DEPTHS and tiles == (1 if M <= 8 else 2)
    assert warps in (4, 8, 16) and warps <= -(-K // 128)
    assert not (late and tiles == 2)  # LATE is only instantiated for one token tile
    assert not (dual and k == 5)      # k = 5: one chain (measured)
    assert smem == G.lut_bytes(k) + M * -(-K // 128) * 128 * 2 + warps * 128 * tiles * 4 + 128
    key = (k, "float16", "uint8", True, depth, tiles, dual, late)
    assert key in G.GEMV.instances  # every plan names a compiled instantiation


def test_k5_wide_shapes_take_128_thread_blocks_while_three_fit():
    N, K = DENSE["gateup"]
    for M in (1, 2):
        warps, _, smem, *_ = G.plan(N, K, M, 5)
        assert warps == 4 and 3 * smem <= SMEM_LIMIT
    for M in (3, 4):  # the staged A leaves room for two only: 8 warps (measured faster)
        assert G.plan(N, K, M, 5)[0] == 8
    assert G.plan(*DENSE["Q"], 1, 5)[0] == 8      # 256 groups: one wave of 256-thread blocks anyway
    assert G.plan(*DENSE["gateup"], 1, 4)[0] == 8  # k = 4 keeps three 256-thread blocks per SM


def test_grouped_plan_fewest_groups_per_block_in_one_wave():
    # down: 128 groups per expert; gate/up fused: 64
    assert G.grouped_plan(2048, 512, 4, 8, 1, resident=528)[1] == 64   # 2 groups per block: 512 blocks
    assert G.grouped_plan(2048, 512, 4, 10, 1, resident=528)[1] == 43  # 3 per block: 430 blocks
    assert G.grouped_plan(1024, 2048, 4, 8, 1, resident=264)[1] == 32
    assert G.grouped_plan(1024, 2048, 4, 10, 1, resident=264)[1] == 22
    assert G.grouped_plan(1024, 2048, 4, 1, 1, resident=264)[1] == 64  # one slot: one group per block
    assert G.grouped_plan(2048, 512, 4, 512, 1, resident=528)[1] == 32  # every expert: at most 4 per block
    for slots in (1, 3, 8, 10, 64, 512):
        warps, gx, smem, tiles = G.grouped_plan(1024, 2048, 4, slots, 4, resident=264)
        per = -(-64 // gx)
        assert 1 <= per <= 4 and gx * per >= 64 and (slots * gx <= 264 or per == 4)
    assert G.grouped_plan(1024, 2048, 4, 8, 1, per_block=1)[1] == 64  # override


def test_grouped_kernel_choice():
    assert use_grouped_gemv(1, 512) and use_grouped_gemv(8, 512) and use_grouped_gemv(8, 2048)
    assert use_grouped_gemv(16, 2048) and not use_grouped_gemv(16, 512)  # down: the grouped MMA kernel
    assert not use_grouped_gemv(17, 2048)
