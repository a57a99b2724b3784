"""GroupNormBackward on Ascend950: CANN's arch35 ("regbase") GroupNormGrad host tiling, reproduced.

Sources (hicann/ops-nn, ``norm/group_norm_grad/op_host/``): ``group_norm_grad_tiling_arch35.cpp`` (the
``GroupNormGradRegBaseTiling`` class; its constants and member types in ``group_norm_grad_tiling_arch35.h``),
``group_norm_grad_empty_tiling_arch35.cpp`` (key 500) and the TilingData structs of
``group_norm_grad_tiling.h``. ``TilingGroupNormGrad`` in ``group_norm_grad_tiling.cpp`` picks the empty tiling
when the input has no element and gamma has some, else the regbase one. The platform figures are
``TilingPrepareForGroupNormGrad``'s: cores ``GetCoreNumAiv``, UB ``GetCoreMemSize(UB)``, ``vectorLen`` the
vector register in float32 lanes (``GetVRegSize / 4``), ``blockSize`` the UB block, the system workspace
``GetLibApiWorkSpaceSize``.

What the code computes, in its order (``DoOpTiling``, ``GetWorkspaceSize``, ``PostTiling``):

- ``CalBinaryParams`` for HxW and for C/G: ``Q`` the largest ``vectorLen * 2**k`` below the length (at
  least ``vectorLen / 2``), ``lastNum = Q / vectorLen`` when that is at most ``vectorLen``, else ``vectorLen``
  with ``K = log2(Q / vectorLen**2)``.
- ``BlockTiling``: the UB reserve for the per-group vectors; N*G <= 16 also splits stage 0 (N*C channels,
  ``ceil(N*C / cores)`` a core); stage 1 splits the N*G tasks as A2 does (``taskNumPerCore = ceil``, the
  first ``tailCore`` cores one more).
- ``UbTiling``: mode 100 (a whole group in UB) when ``mode0UbCapGNum > 0``; else 400 (small N x G) when a
  channel fits, N*G <= 16, stage 0 gives each core at least 2 channels, ``N * (C/G / mode1UbCapCNum) >= 32``
  and N*C <= 240000, otherwise 200 (channels); 300 (recompute: HxW in loops of ``mode2OneLoopSize``, a main
  part of ``binaryAddQuotient`` and a fold part) when not even one channel fits.
- ``Stage2Tiling`` when N > 1 or mode 400: ``reduceNCnt`` workspace rows (N in mode 400, else ceil(N/2));
  stage-2 mode 1 (channels a core, the rows summed by a binary-add tree past 8 rows) when a UB share holds a
  channel's column, else mode 2 (row tiles with cache levels).
- Key ``mode + dtype`` (1 f32/f32, 2 f16/f16, 3 bf16/bf16, 4 f16/f32, 5 bf16/f32); workspace
  ``system + 2 * W * 4`` with ``W = reduceNCnt * C`` (``N*C`` in mode 400), cleared in blocks of
  ``max(ceil8(ceil(W / cores)), 512)`` floats; ``block_dim`` the largest of stage 0 (mode 400), stage 1, the
  clearing blocks and stage 2.

Integer arithmetic follows the members' C++ types (uint32 wraps where a member is uint32). Where the code
leaves a value unset it keeps its member's initializer in ``group_norm_grad_tiling_arch35.h``: 1 for
``stage2Mode`` (``uint32_t stage2Mode_ = 1``: N = 1 outside mode 400 skips ``Stage2Tiling``) and ``HXW``
(``int64_t HxW_ = 1``, the product's seed: a 2-D input has no spatial dims), else 0: ``cNumMode2PerCore``,
``tailcNumMode2PerCore``, ``stage2LoopCnt`` and ``stage2FactorN`` (never assigned), the stage-2 fields at
N = 1, and the empty tiling's ``colsPerUBDG`` on the multi-core full-load path (an uninitialised member
there). ``Stage2Mode2Tiling``'s failure is ignored by its caller, as in the code.
"""

from __future__ import annotations

from .plan import TilingError
from .soc import SocSpec
from .tiling_data import c_struct, tiling_data_class

OP = "group_norm_backward"
U32 = 0xFFFFFFFF
HEADER = "norm/group_norm_grad/op_host/group_norm_grad_tiling.h"

# group_norm_grad_tiling_arch35.h / .cpp
CACHE_BUFF_SIZE = 256
UPPER_CARRYING_LIMIT = 8000
MAX_C_SIZE = 240000
WORKSPACE_COPIES = 2
DOUBLE_BUFFER = 2
BINARY_ADD_COEF = 2
UB_COPIES_4, UB_COPIES_3, UB_COPIES_2 = 4, 3, 2
SPLIT_COUNT = 2
MODE_0, MODE_1, MODE_2, MODE_3 = 100, 200, 300, 400
EMPTY_KEY = 500
STAGE2_MODE_1, STAGE2_MODE_2 = 1, 2
RA_BINARY_ADD_THRESHOLD = 8
SCALE_COEF_EIGHT = 8
MIN_BLOCK_SIZE = 512
SMALL_NG = 16
STAGE0_C_PER_CORE = 2
SMALL_NG_ND_CHAT = 32
FLOAT_BYTES, HALF_BYTES = 4, 2
N_TILE_NUMS = (128, 256, 512, 1024, 2048, 4096)
# group_norm_grad_empty_tiling_arch35.cpp
MIN_WORKSPACE_SIZE = 16 * 1024 * 1024
MAX_CORE_COLS = 8000

#: GNGDtypeKey: (dy dtype, mean dtype) -> the key's last digit. The pairs that are missing do not exist on the
#: 950 (the op_api refuses them: float32 data takes float32 statistics only).
DTYPE_KEY = {("float32", "float32"): 1, ("float16", "float16"): 2, ("bfloat16", "bfloat16"): 3,
             ("float16", "float32"): 4, ("bfloat16", "float32"): 5}
MODE_NAMES = {MODE_0: "group full load", MODE_1: "channel full load", MODE_2: "recompute",
              MODE_3: "small N x G", EMPTY_KEY: "empty input"}

#: ``GroupNormGradRegBaseTilingData``'s three structs as ``group_norm_grad_tiling.h`` declares them.
BASE_MEMBERS = c_struct(
    "int64_t N; int64_t C; int64_t HXW; int64_t G; int64_t clrBlockSize; int64_t clrTailBlockSize; "
    "uint32_t clrBlockNum; uint32_t taskNumPerCore; uint32_t taskNumPerTailCore; uint32_t tailCore; "
    "uint32_t stage1CoreUsed; uint32_t mode0UbCapGNum; uint32_t mode1UbCapCNum; uint32_t mode2UbCapEle; "
    "uint32_t mode2UbIterNum; uint32_t mode2UbTailNum; uint32_t mode2MainLoopCnt; uint32_t mode2FoldLoopCnt; "
    "uint32_t mode2OneLoopSize; uint32_t mode2FoldTail; uint32_t workSpaceSize; int32_t dxIsRequire; "
    "int32_t dgammaIsRequire; int32_t dbetaIsRequire; uint32_t stage0TaskNumPerCore; "
    "uint32_t stage0TaskNumPerTailCore; uint32_t stage0TailCore; uint32_t stage0CoreUsed")
REDUCE_MEMBERS = c_struct("int64_t binaryAddQuotient; uint32_t binaryAddK; uint32_t binaryAddLastNum; "
                          "int64_t binaryCGQuotient; uint32_t binaryCGK; uint32_t binaryCGLastNum")
KERNEL2_MEMBERS = c_struct(
    "uint32_t stage2Mode; uint32_t cFactor; uint32_t cBlockFactor; uint32_t cTailBlockFactor; "
    "uint32_t stage2CoreUsed; uint32_t stage2BinaryAddK; uint32_t cNumMode2PerCore; uint32_t tailcNumMode2PerCore; "
    "int64_t stage2BinaryAddQuotient; int64_t reduceNCnt; int64_t stage2LoopCnt; int64_t stage2FactorN; "
    "int64_t cFactorStage2Mode2; int64_t cLoopMainBlock; int64_t cTailMainBlock; int64_t cLoopTailBlock; "
    "int64_t cTailTailBlock; int64_t nFactorStage2Mode2; int64_t nLoop; int64_t nMainFlodCount; int64_t nTail; "
    "int64_t cacheBufferCount; int32_t resultCacheId")
REGBASE_MEMBERS = (("GroupNormGradBaseParams", ("gNGBaseParams", BASE_MEMBERS)),
                   ("GroupNormGradReduceParams", ("gNGReduceParams", REDUCE_MEMBERS)),
                   ("GroupNormGradKernel2Params", ("gNGKernel2Params", KERNEL2_MEMBERS)))
EMPTY_MEMBERS = c_struct(
    "uint32_t usedCoreNumDG; uint64_t colsPerCoreDG; uint64_t cols; uint32_t ubSize; uint64_t colsPerUBDG; "
    "uint64_t coreUbBlockCount; uint64_t tailUbCols; uint64_t lastCoreBlockCount; uint64_t lastCoreTailUbCols; "
    "uint64_t colsLastCoreDG; uint32_t workspaceSize")

#: ``GroupNormGradRegBaseTilingData``: its three structs' fields in turn (gNGBaseParams, gNGReduceParams,
#: gNGKernel2Params; the names are unique across them).
GroupNormGradRegBaseTilingData = tiling_data_class("GroupNormGradRegBaseTilingData", HEADER, REGBASE_MEMBERS,
                                                   host_defaults={"HXW": 1, "stage2Mode": STAGE2_MODE_1})
GroupNormGradEmptyTilingData = tiling_data_class("GroupNormGradEmptyTilingData", HEADER, EMPTY_MEMBERS)


def _u32(value: int) -> int:
    return value & U32


def _ceil_div(a: int, b: int) -> int:
    """Ops::Base::CeilDiv on signed operands: C++ truncating division of ``a + b - 1`` by ``b``."""
    n = a + b - 1
    return -((-n) // b) if n < 0 else n // b


def _ceil_align(a: int, b: int) -> int:
    return _ceil_div(a, b) * b


def binary_params(reduce_num: int, vector_len: int) -> tuple[int, int, int]:
    """``CalBinaryParams``: (binaryQuotient, binaryK, binaryLastNum) of a reduction of ``reduce_num``."""
    quotient = vector_len
    while quotient < reduce_num:
        quotient *= BINARY_ADD_COEF
    quotient //= BINARY_ADD_COEF
    vcadd = quotient // vector_len
    if vcadd <= vector_len:
        return quotient, 0, vcadd
    adds = vcadd // vector_len
    return quotient, (adds & -adds).bit_length() - 1, vector_len


def _nearest_power2(value: int) -> int:
    """``FindNearestPower2``: 0 up to 1, then the largest power of two below ``value``."""
    if value <= 1:
        return 0
    if value <= 2:
        return 1
    if value <= 4:
        return 2
    return 1 << ((value - 1).bit_length() - 1)


def _cache_id(idx: int) -> int:
    """``GetCacheID``: popcount(idx ^ (idx + 1)) - 1, the number of trailing one bits of ``idx``."""
    return bin(idx ^ (idx + 1)).count("1") - 1


def _stage2_mode2(c: int, reduce_n: int, cores: int, ub: int, block: int, td: dict) -> int:
    """``Stage2Mode2Tiling``; returns stage2CoreUsed."""
    block_fp32 = block // FLOAT_BYTES
    base = align_base = 128 // FLOAT_BYTES
    if c <= block_fp32:
        base = align_base = block_fp32
    c_block = _ceil_div(_ceil_div(c, cores), align_base) * align_base
    c_block = max(base, c_block)
    used = _ceil_div(c, c_block)
    c_tile_block = c - (used - 1) * c_block
    tile_base = min(512 // FLOAT_BYTES, c_block)
    for n_tile in N_TILE_NUMS:
        n_loop = reduce_n // n_tile
        total_loop = _ceil_div(reduce_n, n_tile)
        basic = _nearest_power2(total_loop)
        if basic == 0:
            break
        cache_count = basic.bit_length()
        c_tile = (ub - HALF_BYTES * UB_COPIES_4) // (3 * n_tile + 2 + cache_count) // FLOAT_BYTES
        c_tile = c_tile // tile_base * tile_base
        if (c_tile < c_block and n_tile != N_TILE_NUMS[0]) or c_tile <= 0:
            break
        c_loop_main = _ceil_div(c_block, c_tile)
        c_loop_tail = _ceil_div(c_tile_block, c_tile)
        td.update(cFactorStage2Mode2=c_tile, nFactorStage2Mode2=n_tile, nLoop=basic, nMainFlodCount=n_loop - basic,
                  nTail=reduce_n - n_loop * n_tile, cacheBufferCount=cache_count, resultCacheId=_cache_id(basic - 1),
                  cLoopMainBlock=c_loop_main, cTailMainBlock=c_block - (c_loop_main - 1) * c_tile,
                  cLoopTailBlock=c_loop_tail, cTailTailBlock=c_tile_block - (c_loop_tail - 1) * c_tile)
    return used


def arch35_tiling(n: int, c: int, hxw: int, g: int, dtype: str, out_dtype: str, mask, soc: SocSpec) -> dict:
    """The regbase tiling of a non-empty problem: ``{"td": words, "key", "block_dim", "mode",
    "stage0_cores", "stage1_cores", "stage2_cores", "user_bytes"}``. Raises TilingError where the code
    returns GRAPH_FAILED."""
    cores, ub, block = soc.vector_cores, soc.ub_bytes, soc.ub_block_bytes
    vector_len = soc.vreg_bytes // FLOAT_BYTES
    key_dtype = DTYPE_KEY.get((dtype, out_dtype))
    if key_dtype is None:
        raise TilingError(f"[{OP}] on {soc.name} the dtypes of mean and rstd must be float when x, dy and dx "
                          f"are float, and mean's ({out_dtype}) must be float32 or x's ({dtype})")
    c_g = c // g
    if c_g == 0 or c % g or c_g > UPPER_CARRYING_LIMIT:
        raise TilingError(f"[{OP}] C={c} must split into group={g} uniform groups of at most "
                          f"{UPPER_CARRYING_LIMIT} channels (ParamsCheck)")
    nxg, nxc = n * g, n * c
    q_hw, k_hw, last_hw = binary_params(hxw, vector_len)
    q_cg, k_cg, last_cg = binary_params(c_g, vector_len)
    td = GroupNormGradRegBaseTilingData.initial_words()

    # BlockTiling
    t_bytes = FLOAT_BYTES if dtype == "float32" else HALF_BYTES
    half_u = out_dtype != "float32"
    cg_float = _ceil_align(c_g, block // FLOAT_BYTES)
    cg_half = _ceil_align(c_g, block // HALF_BYTES)
    if nxg <= SMALL_NG:
        alloc = cg_float * FLOAT_BYTES * (UB_COPIES_4 + UB_COPIES_2)
        temp = cg_half * HALF_BYTES if half_u else 0
    else:
        alloc = cg_float * FLOAT_BYTES * UB_COPIES_4
        temp = cg_half * UB_COPIES_2 * HALF_BYTES if half_u else 0
    reserve = _u32(alloc + temp + UB_COPIES_2 * block)
    stage0_cores = stage0_per_core = 0
    if nxg <= SMALL_NG:
        stage0_per_core = _u32(_ceil_div(nxc, cores))
        stage0_cores = _u32((nxc - 1) // stage0_per_core + 1)
        per_tail, tail = stage0_per_core, stage0_cores
        if nxc % stage0_cores:
            per_tail, tail = stage0_per_core - 1, nxc % stage0_cores
        td.update(stage0TaskNumPerCore=stage0_per_core, stage0TaskNumPerTailCore=_u32(per_tail),
                  stage0TailCore=_u32(tail), stage0CoreUsed=stage0_cores)
    tpc = _u32(_ceil_align(nxg, cores) // cores)
    stage1 = _u32((nxg - 1) // tpc + 1)
    tptc, tail_core = tpc, stage1
    if nxg % stage1:
        tptc, tail_core = tpc - 1, nxg % stage1
    td.update(N=n, C=c, HXW=hxw, G=g, taskNumPerCore=tpc, taskNumPerTailCore=_u32(tptc), tailCore=_u32(tail_core),
              stage1CoreUsed=stage1, binaryAddQuotient=q_hw, binaryAddK=k_hw, binaryAddLastNum=last_hw,
              binaryCGQuotient=q_cg, binaryCGK=k_cg, binaryCGLastNum=last_cg)

    # UbTiling
    if ub < reserve:
        raise TilingError(f"[{OP}] a {ub}-byte UB is less than the {reserve}-byte reserve (UbTiling)")
    usable = (ub - reserve) // DOUBLE_BUFFER
    t_align = block // t_bytes
    mode0 = _u32(usable // (_ceil_align(c_g * hxw, t_align) * t_bytes * UB_COPIES_3 + block * UB_COPIES_2))
    mode1 = _u32(usable // (_ceil_align(hxw, t_align) * t_bytes * UB_COPIES_3))
    td.update(mode0UbCapGNum=mode0, mode1UbCapCNum=mode1)
    if mode0 > 0:
        mode = MODE_0
    elif mode1 > 0:
        small = nxg <= SMALL_NG and stage0_per_core >= STAGE0_C_PER_CORE and n * (c_g // mode1) >= SMALL_NG_ND_CHAT
        mode = MODE_3 if small and nxc <= MAX_C_SIZE else MODE_1
    else:
        mode = MODE_2
        _mode2_ub(hxw, ub, reserve, t_bytes, block, vector_len, q_hw, td)

    # Stage2Tiling
    stage2 = 0
    reduce_n = n if mode == MODE_3 else _ceil_div(n, SPLIT_COUNT)
    if n > 1 or mode == MODE_3:
        elem = HALF_BYTES if half_u else FLOAT_BYTES
        share = ub // SPLIT_COUNT // DOUBLE_BUFFER // block * block
        per_c = (reduce_n + 1) * FLOAT_BYTES + FLOAT_BYTES + elem
        if reduce_n > SCALE_COEF_EIGHT:
            per_c += _ceil_div(reduce_n, SCALE_COEF_EIGHT) * FLOAT_BYTES
        c_factor = _u32(share // per_c)
        c_factor_align = _u32(c_factor * elem // block * block // elem)
        td.update(reduceNCnt=reduce_n, cFactor=c_factor_align)
        if c_factor_align >= 1:
            td["stage2Mode"] = STAGE2_MODE_1
            least = block // elem
            c_block = _u32((c + cores - 1) // cores)
            c_block = max(c_block, least)
            stage2 = _u32((c + c_block - 1) // c_block)
            td.update(cBlockFactor=c_block, stage2CoreUsed=stage2, cTailBlockFactor=_u32(c - c_block * (stage2 - 1)))
            if reduce_n > RA_BINARY_ADD_THRESHOLD:
                quotient = RA_BINARY_ADD_THRESHOLD
                while quotient < reduce_n:
                    quotient *= BINARY_ADD_COEF
                quotient //= BINARY_ADD_COEF
                td.update(stage2BinaryAddQuotient=quotient,
                          stage2BinaryAddK=(quotient // RA_BINARY_ADD_THRESHOLD - 1).bit_length())
        else:
            td["stage2Mode"] = STAGE2_MODE_2
            stage2 = _u32(_stage2_mode2(c, reduce_n, cores, ub, block, td))
            td["stage2CoreUsed"] = stage2

    # GetWorkspaceSize
    words = nxc if mode == MODE_3 else _ceil_div(n, SPLIT_COUNT) * c
    clr_factor = _ceil_div(_ceil_div(words, cores), block // FLOAT_BYTES) * (block // FLOAT_BYTES)
    clr_size = max(clr_factor, MIN_BLOCK_SIZE)
    clr_num = _u32(_ceil_div(words, clr_size))
    td.update(workSpaceSize=_u32(words), clrBlockSize=clr_size, clrBlockNum=clr_num,
              clrTailBlockSize=words - clr_size * (clr_num - 1),
              dxIsRequire=int(mask[0]), dgammaIsRequire=int(mask[1]), dbetaIsRequire=int(mask[2]))
    block_dim = max(stage1, clr_num, stage2, stage0_cores if mode == MODE_3 else 0)
    return {"td": GroupNormGradRegBaseTilingData.from_words(td), "key": mode + key_dtype, "block_dim": block_dim,
            "mode": mode, "stage0_cores": stage0_cores if mode == MODE_3 else 0, "stage1_cores": stage1,
            "stage2_cores": stage2, "clear_blocks": clr_num, "reduce_rows": reduce_n,
            "user_bytes": WORKSPACE_COPIES * words * FLOAT_BYTES}


def _mode2_ub(hxw, ub, reserve, t_bytes, block, vector_len, quotient, td) -> None:
    """``Mode2UbTiling``: HxW in loops of ``mode2OneLoopSize``, the binary-add main part then its fold."""
    cache = CACHE_BUFF_SIZE * 3 * UB_COPIES_2 * FLOAT_BYTES
    if ub < reserve + cache:
        raise TilingError(f"[{OP}] a {ub}-byte UB is less than the reserve and the recompute caches (Mode2UbTiling)")
    usable = _u32((ub - reserve - cache) // DOUBLE_BUFFER)
    cap = usable // (t_bytes * UB_COPIES_3) // block * block
    loop = vector_len
    while loop < cap // BINARY_ADD_COEF:
        loop *= BINARY_ADD_COEF
    loop //= BINARY_ADD_COEF
    if loop == 0 or quotient % loop:
        raise TilingError(f"[{OP}] the recompute main block has a tail: binaryAddQuotient {quotient}, "
                          f"mode2OneLoopSize {loop} (Mode2UbTiling)")
    main, fold = _ceil_div(quotient, loop), _ceil_div(hxw - quotient, loop)
    if main < 1 or fold < 1:
        raise TilingError(f"[{OP}] mode2MainLoopCnt {main} or mode2FoldLoopCnt {fold} is less than 1 (Mode2UbTiling)")
    cap = loop * BINARY_ADD_COEF
    iters = _ceil_align(hxw, cap) // cap
    rest = (hxw - quotient) % loop
    td.update(mode2OneLoopSize=loop, mode2MainLoopCnt=_u32(main), mode2FoldLoopCnt=_u32(fold),
              mode2FoldTail=rest or loop, mode2UbCapEle=cap, mode2UbIterNum=_u32(iters),
              mode2UbTailNum=cap if hxw - iters * cap == 0 else hxw - (iters - 1) * cap)


def _nearest_lower_power_of_two(value: int) -> int:
    """``NearestLowerPowerOfTwo``: the exponent of the largest power of two at most ``value``."""
    exponent, power = 0, 0
    while power <= value:
        exponent += 1
        power = 2 ** exponent
    return exponent - 1


def empty_tiling(c: int, soc: SocSpec) -> GroupNormGradEmptyTilingData:
    """``GroupNormGradEmptyTiling`` (key 500, gamma's C columns zeroed on the cores): its TilingData."""
    cores, ub = soc.vector_cores, soc.ub_bytes
    words = dict(cols=c, ubSize=_u32(ub), workspaceSize=MIN_WORKSPACE_SIZE, colsPerUBDG=0, coreUbBlockCount=0,
                 lastCoreBlockCount=0)
    if c <= MAX_CORE_COLS:
        words.update(usedCoreNumDG=1, colsPerCoreDG=c, colsLastCoreDG=c, tailUbCols=c, colsPerUBDG=c,
                     lastCoreTailUbCols=c)
    else:
        per_core = _ceil_div(c, cores)
        last = c - per_core * (cores - 1)
        words.update(usedCoreNumDG=cores, colsPerCoreDG=per_core, colsLastCoreDG=last)
        if ub >= 2 * per_core * FLOAT_BYTES:
            words.update(tailUbCols=per_core, lastCoreTailUbCols=last)
        else:
            per_ub = 2 ** _nearest_lower_power_of_two(ub // (2 * FLOAT_BYTES))
            blocks = (per_core + per_ub - 1) // per_ub - 1
            words.update(colsPerUBDG=per_ub, coreUbBlockCount=blocks, tailUbCols=per_core - per_ub * blocks)
            if per_ub > last:
                words.update(lastCoreTailUbCols=last)
            else:
                last_blocks = (last + per_ub - 1) // per_ub - 1
                words.update(lastCoreBlockCount=last_blocks, lastCoreTailUbCols=last - per_ub * last_blocks)
    order = GroupNormGradEmptyTilingData.__dataclass_fields__
    return GroupNormGradEmptyTilingData.from_words({name: words[name] for name in order})
