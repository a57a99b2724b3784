"""Hardware figures of the SoCs whose tiling is modeled.

Every core count and UB size used anywhere in ``tiling`` comes from this table; nothing else
hard-codes one. Figures come from the public CANN sources (``research/ascend-cann-notes.md`` §1.4
and §7). A figure without a primary source is listed in ``SocSpec.unverified``.

``host`` describes the machine normkern runs on: vector cores = Numba threads (``NUMBA_NUM_THREADS``
or the CPUs this process may use), "UB" = the per-core L2 cache, and no system workspace.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

MiB = 1024 * 1024
GiB = 1024 * MiB

#: SoC families, by ``SocSpec.arch`` (the CANN ``__DAV_*__`` architecture macro, or ``host``).
A2_A3 = "DAV_2201"
ATLAS_TRAINING = "DAV_1001"
ATLAS_INFERENCE = "DAV_2002"
ASCEND950 = "DAV_3510"
HOST = "host"

#: Bytes of one element of each dtype the ops take.
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}

#: Bytes that ``GetCoreMemSize(UB)`` withholds on Ascend910B / Ascend910_93 (``LOCAL_RESERV_SIZE``).
ASCEND910B_UB_RESERVE = 256


@dataclass(frozen=True)
class SocSpec:
    """One SoC as the host tiling sees it.

    ``ub_bytes`` is what a tiling function receives from ``GetCoreMemSize(UB)``; ``ub_raw_bytes``
    is the platform's ``ub_size``. ``system_workspace_bytes`` is ``GetLibApiWorkSpaceSize()``, the
    part of every workspace reserved for the runtime that the kernels never touch.
    """

    name: str
    product: str
    arch: str
    vector_cores: int
    cube_cores: int
    ub_bytes: int
    ub_raw_bytes: int
    system_workspace_bytes: int
    l2_bytes: int
    hbm_bytes: int
    coupled: bool
    ub_block_bytes: int = 32
    vreg_bytes: int = 256
    unverified: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for field in ("vector_cores", "ub_bytes", "ub_raw_bytes", "ub_block_bytes", "vreg_bytes"):
            value = getattr(self, field)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"SocSpec {self.name!r}: {field} must be a positive int, got {value!r}")
        if self.ub_bytes > self.ub_raw_bytes:
            raise ValueError(
                f"SocSpec {self.name!r}: ub_bytes must not exceed ub_raw_bytes "
                f"({self.ub_bytes} > {self.ub_raw_bytes})"
            )
        if self.system_workspace_bytes < 0:
            raise ValueError(f"SocSpec {self.name!r}: system_workspace_bytes must be >= 0")

    def __hash__(self) -> int:
        # Plans are cached by SoC: hash the fields once, not on every planner call.
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self)))
            object.__setattr__(self, "_hash", cached)
        return cached

    def block_elems(self, dtype: str) -> int:
        """Elements of ``dtype`` in one UB block (8 float32 or 16 half in a 32-byte block)."""
        return self.ub_block_bytes // DTYPE_BYTES[dtype]

    @property
    def vreg_lanes_f32(self) -> int:
        """float32 lanes of one vector register (64 on every Ascend SoC)."""
        return self.vreg_bytes // 4


def _ascend910b(name: str, vector: int, cube: int, l2: int, hbm: int, unverified=()) -> SocSpec:
    return SocSpec(
        name=name,
        product="Atlas A2",
        arch=A2_A3,
        vector_cores=vector,
        cube_cores=cube,
        ub_bytes=196608 - ASCEND910B_UB_RESERVE,
        ub_raw_bytes=196608,
        system_workspace_bytes=16 * MiB,
        l2_bytes=l2,
        hbm_bytes=hbm,
        coupled=False,
        unverified=tuple(unverified),
    )


_PRESETS: dict[str, SocSpec] = {
    spec.name: spec
    for spec in (
        _ascend910b("Ascend910B1", 48, 24, 192 * MiB, 64 * GiB),
        _ascend910b("Ascend910B2", 48, 24, 192 * MiB, 64 * GiB),
        _ascend910b("Ascend910B3", 40, 20, 192 * MiB, 64 * GiB,
                    unverified=("vector_cores", "cube_cores", "l2_bytes", "hbm_bytes")),
        _ascend910b("Ascend910B4", 40, 20, 96 * MiB, 32 * GiB),
        dataclasses.replace(
            _ascend910b("Ascend910_93", 48, 24, 192 * MiB, 64 * GiB,
                        unverified=("vector_cores", "cube_cores", "l2_bytes", "hbm_bytes")),
            product="Atlas A3",
        ),
        SocSpec(
            name="Ascend910", product="Atlas training", arch=ATLAS_TRAINING,
            vector_cores=32, cube_cores=32, ub_bytes=262144, ub_raw_bytes=262144,
            system_workspace_bytes=2 * MiB, l2_bytes=32 * MiB, hbm_bytes=32 * GiB, coupled=True,
            unverified=("vector_cores", "cube_cores", "ub_bytes", "ub_raw_bytes", "l2_bytes", "hbm_bytes"),
        ),
        SocSpec(
            name="Ascend310P3", product="Atlas inference", arch=ATLAS_INFERENCE,
            vector_cores=8, cube_cores=8, ub_bytes=262144, ub_raw_bytes=262144,
            system_workspace_bytes=2 * MiB, l2_bytes=16 * MiB, hbm_bytes=40 * 10**9, coupled=True,
        ),
        SocSpec(
            name="Ascend950", product="Ascend 950PR/950DT", arch=ASCEND950,
            vector_cores=64, cube_cores=32, ub_bytes=245760, ub_raw_bytes=245760,
            system_workspace_bytes=16 * MiB, l2_bytes=128 * MiB, hbm_bytes=0, coupled=False,
            unverified=("vector_cores", "cube_cores", "ub_bytes", "ub_raw_bytes", "l2_bytes", "hbm_bytes"),
        ),
    )
}

#: The SoC every planner uses when none is named.
DEFAULT_SOC = "Ascend910B2"


def _host_threads() -> int:
    env = os.environ.get("NUMBA_NUM_THREADS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _parse_cache_size(text: str) -> int:
    text = text.strip().upper()
    units = {"K": 1024, "M": MiB, "G": GiB}
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


def _host_cache_bytes(level: int, default: int) -> int:
    """Size of this CPU's cache at ``level`` (per instance), read from sysfs."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            if int((index / "level").read_text()) == level and (index / "type").read_text().strip() != "Instruction":
                return _parse_cache_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
    return default


@lru_cache(maxsize=1)
def host_soc() -> SocSpec:
    """The SoC record of this machine (computed once per process)."""
    l2 = _host_cache_bytes(2, 1 * MiB)
    return SocSpec(
        name="host", product="this CPU", arch=HOST,
        vector_cores=_host_threads(), cube_cores=0, ub_bytes=l2, ub_raw_bytes=l2,
        system_workspace_bytes=0, l2_bytes=_host_cache_bytes(3, 32 * MiB), hbm_bytes=0, coupled=True,
    )


def unit_test_soc(soc: str | SocSpec | None = None, core_num: int | None = None,
                  ub_size: int | None = None) -> SocSpec:
    """``soc`` as an ops-nn tiling unit test fakes it: the compile info's ``"CORE_NUM"`` vector cores and
    its ``"UB_SIZE"`` reaching the tiling whole (the faked platform withholds no UB reserve, so an A2
    test's 196608 is what the host code divides, where a device gives it 196352). Unset, either keeps
    the preset's value; a UT's printed TilingData is reproduced only on the platform it ran on."""
    base = get_soc(soc)
    if base.arch == HOST:
        raise ValueError("unit_test_soc: host is not an NPU a unit test fakes; name an Ascend preset")
    cores = base.vector_cores if core_num is None else core_num
    ub = base.ub_raw_bytes if ub_size is None else ub_size
    return dataclasses.replace(base, name=f"{base.name} (UT: CORE_NUM {cores}, UB_SIZE {ub})",
                               vector_cores=cores, ub_bytes=ub, ub_raw_bytes=ub)


def soc_names() -> tuple[str, ...]:
    """Names accepted by :func:`get_soc`, presets first, ``host`` last."""
    return (*_PRESETS, "host")


def get_soc(soc: str | SocSpec | None = None) -> SocSpec:
    """Return the preset named ``soc`` (a ``SocSpec`` passes through; None means the default)."""
    if isinstance(soc, SocSpec):
        return soc
    if soc is None:
        soc = DEFAULT_SOC
    if soc == "host":
        return host_soc()
    try:
        return _PRESETS[soc]
    except (KeyError, TypeError):
        raise ValueError(f"unknown SoC {soc!r}; known: {', '.join(soc_names())}") from None
