"""Command line: ``normkern socs``, ``normkern plan OP ...``, ``normkern run OP ...``,
``normkern determinism OP ...``."""

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


def _plan_group_norm(shape, dtype, soc, strategy, group=1):
    if len(shape) < 2:
        raise ValueError(f"group_norm_backward plans take --shape N,C[,spatial...] and --group, got {shape}")
    hxw = 1
    for extent in shape[2:]:
        hxw *= extent
    return tiling.plan_group_norm_backward(shape[0], shape[1], hxw, group, dtype, soc, strategy)


#: ``--shape`` is the input's shape, or for the gather op the (D, C) shape of ``mean``.
PLANNERS = {"batch_norm_stats": tiling.plan_batch_norm_stats,
            "batch_norm_gather_stats_with_counts": _plan_gather,
            "fast_batch_norm_backward": tiling.plan_fast_batch_norm_backward,
            "group_norm_backward": _plan_group_norm}


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
                                                    training=not args.inference, weight_dtype="float32")
    if args.op == "group_norm_backward":
        return _plan_group_norm(args.shape, args.dtype, args.soc, args.strategy, args.group)
    return PLANNERS[args.op](args.shape, args.dtype, args.soc, args.strategy)


def _cmd_plan(args) -> int:
    plan = _plan(args)
    print(plan.to_json() if args.json else plan.explain())
    return 0


def _simulate_batch_norm_stats(plan, kw):
    """The plan simulator's outputs for the example inputs ``kw`` (arrival seed 0, as the run uses)."""
    from normkern.ops.batch_norm_stats import arrival_order, simulate

    return simulate(plan, kw["input"], kw["eps"], arrival_order(plan, 0))


def _simulate_gather_stats(plan, kw):
    """mean_all, invstd_all in mean's dtype and the updated running statistics in theirs."""
    from normkern.ops.batch_norm_gather_stats import simulate

    rm, rv = kw["running_mean"], kw["running_var"]
    mean_all, invstd_all, rm_new, rv_new = simulate(plan, kw["mean"], kw["invstd"], kw["counts"], rm, rv,
                                                    kw["momentum"], kw["eps"])
    return (mean_all.astype(kw["mean"].dtype), invstd_all.astype(kw["mean"].dtype), rm_new.astype(rm.dtype),
            rv_new.astype(rv.dtype))


def _simulate_fast_batch_norm_backward(plan, kw):
    from normkern.ops.fast_batch_norm_backward import fused_views, simulate, statistics, unfused_view

    stats = (kw["weight"], kw["running_mean"], kw["running_var"], kw["save_mean"], kw["save_invstd"])
    dy3, x3 = fused_views(plan, kw["grad_out"], kw["input"])
    dx, gw, gb = simulate(plan, dy3, x3, *statistics(plan, *stats, kw["eps"]))
    return unfused_view(plan, dx.astype(kw["input"].dtype)), gw, gb


def _simulate_group_norm_backward(plan, kw):
    from normkern.ops.group_norm_backward import arrival_order, simulate, task_statistics, task_views

    x = kw["input"]
    dy3, x3 = task_views(plan, kw["grad_out"], x)
    dx, gg, gb = simulate(plan, dy3, x3, *task_statistics(plan, kw["mean"], kw["rstd"], kw["gamma"]),
                          arrival_order(plan, 0))
    return dx.reshape(x.shape).astype(x.dtype), gg.astype(x.dtype), gb.astype(x.dtype)


RUNNERS = {"batch_norm_stats": _simulate_batch_norm_stats,
           "batch_norm_gather_stats_with_counts": _simulate_gather_stats,
           "fast_batch_norm_backward": _simulate_fast_batch_norm_backward,
           "group_norm_backward": _simulate_group_norm_backward}


def _example(args) -> dict:
    from normkern.examples import example_inputs

    return example_inputs(args.op, args.shape, args.dtype, seed=args.seed, group=args.group,
                          training=not args.inference, eps=args.eps)


def _cmd_run(args) -> int:
    """Run the op on seeded random data; report time, error against float64, and the simulator check."""
    import normkern
    from normkern.determinism import plan_for, reference_for

    kw = _example(args)
    gather = args.op == "batch_norm_gather_stats_with_counts"
    # The gather op updates the running statistics in place: the reference and the simulator start
    # from the values before the first call, and its outputs include that call's update.
    pristine = {name: value.copy() if isinstance(value, np.ndarray) else value for name, value in kw.items()}
    plan = plan_for(args.op, kw, args.soc, args.strategy)
    reference = reference_for(args.op, pristine)
    extra = {"arrival_seed": 0} if args.op in ("batch_norm_stats", "group_norm_backward") else {}

    def call():
        return getattr(normkern, args.op)(**kw, soc=args.soc, strategy=args.strategy, **extra)

    start = time.perf_counter()
    outputs = call()
    first = time.perf_counter() - start
    if gather:
        outputs = (*outputs, kw["running_mean"].copy(), kw["running_var"].copy())
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    nbytes = kw["mean"].nbytes + kw["invstd"].nbytes if gather else kw["input"].nbytes
    report = {"plan": str(plan), "first_call_s": round(first, 4), "median_ms": round(float(np.median(times)) * 1e3, 4),
              "input_GBps": round(nbytes / float(np.median(times)) / 1e9, 2)}
    for index, (got, want) in enumerate(zip(outputs, reference, strict=True)):
        scale = float(np.nanmax(np.abs(want), initial=0)) or 1.0
        error = float(np.nanmax(np.abs(got.astype(np.float64) - want), initial=0))
        report[f"output{index}_max_err_rel_to_max"] = float(f"{error / scale:.3g}")
    if args.check:
        report["bitwise_equal_to_simulator"] = all(
            np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))
            for a, b in zip(outputs, RUNNERS[args.op](plan, pristine), strict=True))
    _print_report(report, args.json)
    return 0


def _cmd_determinism(args) -> int:
    """Run the op repeatedly over thread counts, plans and arrival orders; report bitwise agreement."""
    from normkern.determinism import check_determinism

    kw = _example(args)
    strategies = [None if s == "default" else s for s in (args.strategy or "default").split(",")]
    report = check_determinism(args.op, kw, runs=args.runs, threads=args.threads, socs=args.soc.split(","),
                               strategies=strategies, arrival_orders=args.arrival_orders, progress=not args.json)
    if args.json:
        print(report.to_json())
        return 0
    print(report)
    for config in report.configurations:
        print(f"\n{config.plan}")
        for name, out in config.outputs.items():
            errors = ", ".join(f"{e:.1e}" for e in out.errors[:4]) + (" ..." if len(out.errors) > 4 else "")
            print(f"  {name:<12} identical={out.identical!s:<5} distinct={out.distinct:<3} max_ulp={out.max_ulp:<6} "
                  f"max_rel={out.max_rel:.1e} error vs float64: {errors}")
    return 0


def _print_report(report: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        for key, value in report.items():
            print(f"{key:<32} {value}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="normkern", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("socs", help="list the SoC presets").set_defaults(func=_cmd_socs)
    for name, func, helptext in (("plan", _cmd_plan, "print the tiling plan of an op"),
                                 ("run", _cmd_run, "run an op on random data and check it"),
                                 ("determinism", _cmd_determinism, "run an op repeatedly and compare the bits")):
        cmd = sub.add_parser(name, help=helptext)
        cmd.add_argument("op", choices=sorted(RUNNERS) if name == "run" else sorted(PLANNERS))
        cmd.add_argument("--shape", type=_shape, required=True,
                         help="e.g. 32,64,56,56; for the gather op D,C")
        cmd.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"))
        cmd.add_argument("--soc", default=tiling.DEFAULT_SOC,
                         help="a preset name or host (determinism: several, comma-separated)")
        cmd.add_argument("--strategy", default=None, help="force a strategy (determinism: several, comma-separated)")
        cmd.add_argument("--json", action="store_true", help="machine-readable output")
        cmd.set_defaults(func=func)
        cmd.add_argument("--inference", action="store_true", help="fast_batch_norm_backward: training=False")
        cmd.add_argument("--group", type=int, default=1, help="group_norm_backward: the number of groups")
        if name in ("run", "determinism"):
            cmd.add_argument("--eps", type=float, default=1e-5)
            cmd.add_argument("--seed", type=int, default=0)
        if name == "determinism":
            cmd.add_argument("--runs", type=int, default=20, help="runs per plan and thread count")
            cmd.add_argument("--threads", type=_shape, default=(1, 2), help="thread counts, e.g. 1,2")
            cmd.add_argument("--arrival-orders", type=int, default=None,
                             help="cycle through this many seeded arrival orders (default: a fresh one per run)")
        if name == "run":
            cmd.add_argument("--repeat", type=int, default=10)
            cmd.add_argument("--check", action="store_true", help="also compare with the plan simulator")
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, tiling.TilingError) as exc:
        print(f"normkern: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
