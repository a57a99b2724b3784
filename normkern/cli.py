"""Command line: ``normkern socs``, ``normkern plan OP ...``, ``normkern run OP ...``."""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

import tiling


def _plan_gather(shape, dtype, soc, strategy):
    if len(shape) != 2:
        raise ValueError(f"batch_norm_gather_stats_with_counts plans take --shape D,C (mean's shape), got {shape}")
    return tiling.plan_batch_norm_gather_stats_with_counts(shape[0], shape[1], dtype, soc, strategy)


#: ``--shape`` is the input's shape, or for the gather op the (D, C) shape of ``mean``.
PLANNERS = {"batch_norm_stats": tiling.plan_batch_norm_stats,
            "batch_norm_gather_stats_with_counts": _plan_gather,
            "fast_batch_norm_backward": tiling.plan_fast_batch_norm_backward}


def _shape(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape must be comma-separated ints, got {text!r}") from None


def _cmd_socs(args) -> int:
    header = ("name", "product", "arch", "vector", "cube", "ub_bytes", "ub_raw", "sys_ws", "unverified")
    rows = [header]
    for name in tiling.soc_names():
        soc = tiling.get_soc(name)
        rows.append((soc.name, soc.product, soc.arch, str(soc.vector_cores), str(soc.cube_cores),
                     str(soc.ub_bytes), str(soc.ub_raw_bytes), str(soc.system_workspace_bytes),
                     ",".join(soc.unverified) or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip())
    return 0


def _plan(args):
    if args.op == "fast_batch_norm_backward":
        return tiling.plan_fast_batch_norm_backward(args.shape, args.dtype, args.soc, args.strategy,
                                                    training=not args.inference)
    return PLANNERS[args.op](args.shape, args.dtype, args.soc, args.strategy)


def _cmd_plan(args) -> int:
    plan = _plan(args)
    print(plan.to_json() if args.json else plan.explain())
    return 0


def _cmd_run(args) -> int:
    """Run the op on seeded random data; report time, error against float64, and the simulator check."""
    import ml_dtypes

    import normkern
    from normkern.ops.batch_norm_stats import batch_norm_stats_reference, simulate

    dtype = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[args.dtype]
    x = (np.random.default_rng(args.seed).standard_normal(args.shape) * 2 + 1).astype(dtype)
    plan = _plan(args)
    start = time.perf_counter()
    mean, invstd = normkern.batch_norm_stats(x, args.eps, soc=args.soc, strategy=args.strategy, arrival_seed=0)
    first = time.perf_counter() - start
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        normkern.batch_norm_stats(x, args.eps, soc=args.soc, strategy=args.strategy, arrival_seed=0)
        times.append(time.perf_counter() - start)
    ref_mean, ref_invstd = batch_norm_stats_reference(x, args.eps)
    report = {
        "plan": str(plan),
        "first_call_s": round(first, 4),
        "median_ms": round(float(np.median(times)) * 1e3, 4),
        "input_GBps": round(x.nbytes / float(np.median(times)) / 1e9, 2),
        "max_abs_err_mean": float(np.nanmax(np.abs(mean - ref_mean), initial=0)),
        "max_rel_err_invstd": float(np.nanmax(np.abs(invstd / ref_invstd - 1), initial=0)),
    }
    if args.check:
        from normkern.ops.batch_norm_stats import arrival_order

        sim_mean, sim_invstd = simulate(plan, x, args.eps, arrival_order(plan, 0))
        report["bitwise_equal_to_simulator"] = bool(
            np.array_equal(sim_mean, mean, equal_nan=True) and np.array_equal(sim_invstd, invstd, equal_nan=True))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for key, value in report.items():
            print(f"{key:<28} {value}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="normkern", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("socs", help="list the SoC presets").set_defaults(func=_cmd_socs)
    for name, func, helptext in (("plan", _cmd_plan, "print the tiling plan of an op"),
                                 ("run", _cmd_run, "run an op on random data and check it")):
        cmd = sub.add_parser(name, help=helptext)
        cmd.add_argument("op", choices=sorted(PLANNERS) if name == "plan" else ["batch_norm_stats"])
        cmd.add_argument("--shape", type=_shape, required=True,
                         help="e.g. 32,64,56,56; for the gather op D,C")
        cmd.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"))
        cmd.add_argument("--soc", default=tiling.DEFAULT_SOC, help="a preset name or host")
        cmd.add_argument("--strategy", default=None)
        cmd.add_argument("--json", action="store_true", help="machine-readable output")
        cmd.set_defaults(func=func)
        if name == "plan":
            cmd.add_argument("--inference", action="store_true", help="fast_batch_norm_backward: training=False")
        if name == "run":
            cmd.add_argument("--eps", type=float, default=1e-5)
            cmd.add_argument("--repeat", type=int, default=10)
            cmd.add_argument("--seed", type=int, default=0)
            cmd.add_argument("--check", action="store_true", help="also compare with the plan simulator")
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, tiling.TilingError) as exc:
        print(f"normkern: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
