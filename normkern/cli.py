"""The normkern command line: list the SoC presets and what each op supports, print or draw a plan, run an
op on seeded random data, check that it is deterministic, time its strategies, or compile its kernels
ahead of use. Every op comes from the op registry."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import tiling

from . import registry
from .errors import NormkernError
from .progress import progress


class UsageError(ValueError):
    """A bad command-line value: printed as ``normkern: error: [op] ...``, exit status 2."""


def _shape(record: registry.OpRecord, text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        shape = None
    if shape is None or min(shape) < 0:
        raise UsageError(f"[{record.name}] --shape must be comma-separated non-negative ints, got {text!r}")
    low, high = record.shape_ranks
    if not low <= len(shape) <= high:
        raise UsageError(f"[{record.name}] --shape must be {record.shape_help}, got {text!r}")
    return shape


def _options(record: registry.OpRecord, args) -> dict:
    """The op's own flags as keyword arguments; another op's flag, if set, is an error."""
    own = {option.dest for option in record.options}
    for other in registry.records():
        for option in other.options:
            if option.dest not in own and getattr(args, option.dest) != option.kwargs.get("default", True):
                raise UsageError(f"[{record.name}] {option.flag} applies only to {other.name}")
    return {option.dest: getattr(args, option.dest) for option in record.options}


def _cmd_socs(args) -> int:
    specs = [tiling.get_soc(name) for name in tiling.soc_names()]
    if args.json:
        print(json.dumps([{**vars(spec), "unverified": list(spec.unverified)} for spec in specs], indent=2))
        return 0
    header = ("name", "product", "arch", "vector", "cube", "ub_bytes", "ub_raw", "sys_ws", "unverified")
    rows = [header] + [(s.name, s.product, s.arch, str(s.vector_cores), str(s.cube_cores), str(s.ub_bytes),
                        str(s.ub_raw_bytes), str(s.system_workspace_bytes), ",".join(s.unverified) or "-")
                       for s in specs]
    _print_table(rows)
    print(f"\n--soc defaults to {tiling.DEFAULT_SOC} (a model of that NPU); host models this CPU.")
    return 0


def _cmd_ops(args) -> int:
    entries = tiling.support_table()
    if args.json:
        print(json.dumps([{**vars(e), "dtypes": list(e.dtypes)} for e in entries], indent=2))
        return 0
    rows = [("op", "family", "dtypes", "tiling", "note")]
    rows += [(e.op, tiling.FAMILIES[e.family], ",".join(e.dtypes) or "-", e.tiling or "-", e.note) for e in entries]
    _print_table(rows)
    return 0


def _cmd_plan(args) -> int:
    record = registry.get(args.op)
    soc = args.soc
    if args.core_num is not None or args.ub_size is not None:
        try:
            soc = tiling.unit_test_soc(args.soc, args.core_num, args.ub_size)
        except ValueError as error:
            raise UsageError(f"[{record.name}] --core-num/--ub-size: {error}") from None
    plan = record.plan_shape(_shape(record, args.shape), args.dtype, soc, args.strategy,
                             **_options(record, args))
    if args.tiling_words or args.tiling_bytes or args.against:
        return _tiling_data_io(record.name, plan, args)
    print(plan.to_json() if args.json else plan.explain())
    if args.svg:
        # an atomic plan's picture shows the first sum's arrival order of seed 0 (what `run` replays)
        arrival = record.arrival(plan, 0)[0] if record.arrival and not plan.deterministic else None
        try:
            Path(args.svg).write_text(plan.to_svg(arrival))
        except OSError as error:
            raise UsageError(f"[{record.name}] --svg cannot write {args.svg!r}: {error.strerror}") from None
        print(f"[{record.name}] wrote the plan's picture to {args.svg}", file=sys.stderr)
    return 0


def _tiling_data_io(name: str, plan, args) -> int:
    """``--tiling-words`` / ``--tiling-bytes FILE``: the plan's TilingData as CANN prints and passes it;
    ``--against WORDS_OR_FILE``: CANN's words (or a dumped blob) decoded and compared field by field, with
    ``--key`` and ``--block-dim`` beside them; exit status 1 when anything differs."""
    td = plan.tiling_data
    if td is None:
        raise UsageError(f"[{name}] the plan {plan.strategy.value} has no TilingData (it reproduces no CANN struct)")
    try:
        words = td.words_text()
    except ValueError as error:
        raise UsageError(f"[{name}] {error}") from None
    if args.tiling_words:
        print(words)
    if args.tiling_bytes:
        blob = td.to_bytes()
        try:
            Path(args.tiling_bytes).write_bytes(blob)
        except OSError as error:
            raise UsageError(f"[{name}] --tiling-bytes cannot write {args.tiling_bytes!r}: {error.strerror}") from None
        print(f"[{name}] wrote {len(blob)} bytes of {td.struct} to {args.tiling_bytes}", file=sys.stderr)
    if not args.against:
        return 0
    source = Path(args.against)
    try:
        if source.is_file():
            blob = source.read_bytes()
            try:
                given = type(td).from_words_text(blob.decode("ascii"))
            except (UnicodeDecodeError, ValueError):
                given = type(td).from_bytes(blob)
        else:
            given = type(td).from_words_text(args.against)
    except ValueError as error:
        raise UsageError(f"[{name}] --against: {error}") from None
    rows = [(field, td[field], given[field]) for field in td]
    if args.key is not None:
        rows.insert(0, ("(tiling key)", plan.tiling_key, args.key))
    if args.block_dim is not None:
        rows.insert(0 if args.key is None else 1, ("(block_dim)", plan.block_dim, args.block_dim))
    differ = [row for row in rows if row[1] != row[2]]
    if not differ:
        print(f"{td.struct}: all {len(rows)} fields agree")
        return 0
    width = max(len(field) for field, _, _ in differ)
    print(f"{td.struct}: {len(differ)} of {len(rows)} fields differ")
    print(f"  {'field':<{width}} {'plan':>12} {'given':>12}")
    for field, ours, theirs in differ:
        print(f"  {field:<{width}} {ours!s:>12} {theirs!s:>12}")
    return 1


def _example(record: registry.OpRecord, args) -> dict:
    from .examples import example_inputs

    return example_inputs(record.name, _shape(record, args.shape), args.dtype, seed=args.seed, eps=args.eps,
                          **_options(record, args))


def _cmd_run(args) -> int:
    """Run the op on seeded random data; report time, error against float64, and the simulator check."""
    from .determinism import _rel

    record = registry.get(args.op)
    if args.repeat < 1:
        raise UsageError(f"[{record.name}] --repeat must be at least 1, got {args.repeat}")
    kw = _example(record, args)
    # An op that updates inputs in place: the reference and the simulator start from the values
    # before the first call, whose update is part of its outputs.
    pristine = {name: value.copy() if isinstance(value, np.ndarray) else value for name, value in kw.items()}
    plan = record.plan(pristine, args.soc, args.strategy)  # the call's checks first: a bad call is one line
    print(f"[{record.name}] first call: compiling its kernels, or loading them from the Numba cache "
          "(`normkern warmup` does this ahead of time) ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    outputs = record.call(kw, soc=args.soc, strategy=args.strategy, arrival_seed=0)
    first = time.perf_counter() - start
    print(f"[{record.name}] first call done in {first:.2f} s", file=sys.stderr, flush=True)
    reference = record.reference(pristine)
    outputs = tuple(np.array(o, copy=True) if o is not None else None for o in outputs)
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        record.function(**kw, soc=args.soc, strategy=args.strategy, arrival_seed=0)
        times.append(time.perf_counter() - start)
    median = float(np.median(times))
    report = {"plan": str(plan), "first_call_s": round(first, 4), "median_ms": round(median * 1e3, 4),
              "GBps": round(record.bytes_moved(pristine) / median / 1e9, 2)}
    for name, got, want in zip(record.all_outputs, outputs, reference, strict=True):
        report[f"{name}_max_err_rel_to_max"] = float(f"{_rel(got, np.asarray(want)):.3g}")
    if args.check:
        report["bitwise_equal_to_simulator"] = all(
            np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))
            for a, b in zip(outputs, record.simulate(plan, pristine), strict=True))
    _print_report(report, args.json)
    return 0


def _cmd_determinism(args) -> int:
    """Run the op repeatedly over thread counts, plans and arrival orders; report bitwise agreement."""
    from .determinism import check_determinism

    record = registry.get(args.op)
    kw = _example(record, args)
    strategies = [None if s == "default" else s for s in (args.strategy or "default").split(",")]
    try:
        threads = tuple(int(t) for t in args.threads.split(","))
    except ValueError:
        raise UsageError(f"[{record.name}] --threads must be comma-separated ints, got {args.threads!r}") from None
    report = check_determinism(record.name, kw, runs=args.runs, threads=threads, socs=args.soc.split(","),
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


def _cmd_bench(args) -> int:
    """Every strategy asked, timed, checked against float64 and (atomic plans) replayed; a table, a JSON file."""
    from .benchmark import plot, run_bench

    record = registry.get(args.op)
    if args.repeat < 3 or args.arrival_orders < 1:
        raise UsageError(f"[{record.name}] --repeat must be at least 3 and --arrival-orders at least 1, got "
                         f"{args.repeat} and {args.arrival_orders}")
    strategies = None if args.strategy is None else \
        [None if s == "default" else s for s in _split(args.strategy)]
    report = run_bench(record.name, _shape(record, args.shape), args.dtype, socs=_split(args.soc),
                       strategies=strategies, repeat=args.repeat, arrival_orders=args.arrival_orders,
                       seed=args.seed, eps=args.eps, options=_options(record, args), show_progress=True)
    out = args.out or f"normkern-bench-{record.name}.json"
    try:
        Path(out).write_text(report.to_json())
        if args.plot:
            plot(report, args.plot)
    except OSError as error:
        raise UsageError(f"[{record.name}] cannot write {error.filename!r}: {error.strerror}") from None
    print(report.to_json() if args.json else report.table())
    print(f"[{record.name}] wrote {out}" + (f" and {args.plot}" if args.plot else ""), file=sys.stderr)
    return 0


def _print_table(rows) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _print_report(report: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        for key, value in report.items():
            print(f"{key:<32} {value}")


def _cmd_warmup(args) -> int:
    """Compile (or load from Numba's cache) every kernel each op runs for the given dtypes and SoCs: the op's
    warm-up calls (``OpRecord.warmup``, which together reach each of its kernels) under every strategy that
    can run them, one line per call as it finishes, under a progress bar where tqdm is installed."""
    from .examples import example_inputs

    names = _split(args.ops) if args.ops else [r.name for r in registry.records()]
    for name in names:
        registry.get(name, "warmup")
    jobs = [(name, dtype, soc, strategy, shape, options) for name in names for dtype in _split(args.dtypes)
            for soc in _split(args.socs) for shape, options in registry.get(name).warmup
            for strategy in registry.get(name).strategies]
    start = time.perf_counter()
    done = 0
    with progress(len(jobs)) as bar:
        for i, (name, dtype, soc, strategy, shape, options) in enumerate(jobs, 1):
            what = " ".join([name, dtype, soc, strategy.value, "x".join(map(str, shape)),
                             *(f"{key}={value}" for key, value in options.items())])
            bar.set_description_str(what)
            begun = time.perf_counter()
            try:
                registry.get(name).call(example_inputs(name, shape, dtype, **options), soc=soc, strategy=strategy,
                                         deterministic=False, arrival_seed=0)
            except (NormkernError, tiling.TilingError):
                pass  # a dtype or strategy this SoC does not run for such a problem: nothing to compile
            else:
                done += 1
                bar.write(f"[{i}/{len(jobs)}] {what}: {time.perf_counter() - begun:.2f} s", file=sys.stdout)
            bar.update()
    print(f"warmed {done} kernel calls in {time.perf_counter() - start:.1f} s (Numba cache: "
          f"{os.environ.get('NUMBA_CACHE_DIR') or 'beside the sources'})")
    return 0


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _parser() -> argparse.ArgumentParser:
    from . import __version__

    records = registry.records()
    parser = argparse.ArgumentParser(prog="normkern", description=__doc__)
    parser.add_argument("--version", action="version", version=f"normkern {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func, helptext in (("socs", _cmd_socs, "list the SoC presets and their figures"),
                                 ("ops", _cmd_ops, "list which dtypes each op takes on each SoC family")):
        cmd = sub.add_parser(name, help=helptext, description=helptext)
        cmd.add_argument("--json", action="store_true", help="machine-readable output")
        cmd.set_defaults(func=func)
    warm = sub.add_parser("warmup", help="compile the kernels ahead of first use, reporting each",
                          description="compile (or load from the Numba cache) the kernels each op runs, one small "
                          "call per op, dtype, SoC and strategy, so the first real call does not wait")
    warm.add_argument("--ops", default=None, help="comma-separated ops (default: every op)")
    warm.add_argument("--dtypes", default="float32,float16,bfloat16", help="comma-separated (default all three)")
    warm.add_argument("--socs", default=f"host,{tiling.DEFAULT_SOC}",
                      help=f"comma-separated presets (default host,{tiling.DEFAULT_SOC})")
    warm.set_defaults(func=_cmd_warmup)
    strategies = "; ".join(f"{r.name}: {', '.join(s.value for s in r.strategies)}" for r in records)
    for name, func, helptext in (("plan", _cmd_plan, "print the tiling plan of an op"),
                                 ("run", _cmd_run, "run an op on seeded random data and check it"),
                                 ("determinism", _cmd_determinism, "run an op repeatedly and compare the bits"),
                                 ("bench", _cmd_bench, "time every strategy of an op, with its error and spread")):
        several = " (several, comma-separated)" if name in ("determinism", "bench") else ""
        cmd = sub.add_parser(name, help=helptext, description=helptext)
        cmd.add_argument("op", choices=[r.name for r in records])
        default_shape = registry.OpRecord.shape_help
        cmd.add_argument("--shape", required=True, help="; ".join(
            [default_shape] + [f"{r.name}: {r.shape_help}" for r in records if r.shape_help != default_shape]))
        cmd.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"),
                         help="the input's dtype (default float32)")
        cmd.add_argument("--soc", default=tiling.DEFAULT_SOC,
                         help=f"a preset (normkern socs) or host{several}; default {tiling.DEFAULT_SOC}, a model "
                         "of that NPU, not of this CPU")
        cmd.add_argument("--strategy", default=None, help=f"force a strategy{several}: {strategies}")
        cmd.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "plan":
            cmd.add_argument("--svg", metavar="FILE", help="also draw the plan as an SVG picture: each core's share "
                             "of the index space and its UB blocks, the reduction tree, the workspace")
            cmd.add_argument("--tiling-words", action="store_true",
                             help="print the plan's TilingData as the ops-nn unit tests print it (int32 words)")
            cmd.add_argument("--tiling-bytes", metavar="FILE", help="write the plan's TilingData blob to FILE")
            cmd.add_argument("--against", metavar="WORDS_OR_FILE",
                             help="decode CANN's TilingData (printed words, or a file of words or of raw bytes) and "
                             "show field by field where the plan differs (exit status 1 when any does)")
            cmd.add_argument("--key", type=int, default=None, help="with --against: CANN's tiling key")
            cmd.add_argument("--block-dim", type=int, default=None, help="with --against: CANN's block_dim")
            cmd.add_argument("--core-num", type=int, default=None,
                             help="plan on the SoC as an ops-nn unit test fakes it: its compile info's CORE_NUM")
            cmd.add_argument("--ub-size", type=int, default=None,
                             help="... and its UB_SIZE, all of it reaching the tiling (a unit test's platform "
                             "withholds no UB reserve); either keeps the preset's value when unset")
        for record in records:
            for option in record.options:
                cmd.add_argument(option.flag, dest=option.dest,
                                 **{**option.kwargs, "help": f"{record.name}: {option.kwargs['help']}"})
        if name in ("run", "determinism", "bench"):
            cmd.add_argument("--eps", type=float, default=1e-5, help="default 1e-5")
            cmd.add_argument("--seed", type=int, default=0, help="the seed of the random inputs (default 0)")
        if name == "determinism":
            cmd.add_argument("--runs", type=int, default=20, help="runs per plan and thread count (default 20)")
            cmd.add_argument("--threads", default="1,2", help="thread counts, e.g. 1,2 (default)")
            cmd.add_argument("--arrival-orders", type=int, default=None,
                             help="cycle through this many seeded arrival orders (default: a fresh one per run)")
        if name == "bench":
            cmd.add_argument("--repeat", type=int, default=15, help="timed calls per strategy (default 15)")
            cmd.add_argument("--arrival-orders", type=int, default=20,
                             help="seeded arrival orders an atomic plan is replayed over (default 20)")
            cmd.add_argument("--out", metavar="FILE", help="the JSON report (default normkern-bench-OP.json)")
            cmd.add_argument("--plot", metavar="FILE", help="time against error per strategy (the plot extra)")
        if name == "run":
            cmd.add_argument("--repeat", type=int, default=10, help="timed calls after the first (default 10)")
            cmd.add_argument("--check", action="store_true", help="also compare with the plan simulator bit for bit")
        cmd.set_defaults(func=func)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except (NormkernError, tiling.TilingError, ValueError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        op = getattr(args, "op", None)
        if op and not message.startswith("["):
            message = f"[{op}] {message}"
        print(f"normkern: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
