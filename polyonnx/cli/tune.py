"""``polyonnx tune``: tune a model's kernels for this machine; list, export and merge tuning
databases."""

from __future__ import annotations

import argparse

from polyonnx.cli.arguments import RAW, Subparsers, add_model_options, shapes
from polyonnx.options import Options
from polyonnx.records.database import Record, TuningDatabase, default_path

EXAMPLES = """\
examples:
  polyonnx tune model.onnx --budget 20m         tune for this machine, every core
  polyonnx tune model.onnx --budget 5m --threads 1 --db tuning.sqlite
  polyonnx tune model.onnx --ray auto           measure on a local Ray instance
  polyonnx tune model.onnx --ray 10.0.0.5:6379  ... on a Ray cluster's matching nodes
  polyonnx tune --show                          the best record of every kernel and target
  polyonnx tune --show --db tuning.sqlite
  polyonnx tune --export records.json           write the records to JSON
  polyonnx tune --merge other.sqlite            add another database's (or export's) records
"""


def add_parser(sub: Subparsers) -> None:
    t = sub.add_parser(
        "tune",
        help="tune a model's schedules; show, export or merge tuning databases",
        description="Search schedules for every distinct kernel of MODEL on this machine\n"
        "within a time budget, storing what it measures in the tuning database (by\n"
        "default tuning.sqlite beside the compile cache), whose best records compile\n"
        "and run then use. Interrupt it and run it again to continue.",
        epilog=EXAMPLES,
        formatter_class=RAW,
    )
    t.add_argument("model", metavar="MODEL", nargs="?", help="an .onnx file to tune")
    t.add_argument(
        "--budget", default="20m", help="time to spend: seconds, or e.g. 90s, 20m, 1h (20m)"
    )
    t.add_argument("--threads", type=int, metavar="N", help="threads to tune for (every core)")
    t.add_argument(
        "--ray",
        metavar="auto|ADDRESS",
        help="measure as Ray tasks: auto starts a local instance (pip install polyonnx[ray])",
    )
    t.add_argument("--seed", type=int, default=0, help="the search's random seed")
    t.add_argument(
        "--timeout", type=float, default=120.0, help="seconds one candidate may take (120)"
    )
    t.add_argument(
        "--cost-model",
        choices=("auto", "xgboost", "ridge"),
        default="auto",
        help="auto: xgboost when installed, else ridge+knn in numpy",
    )
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument(
        "--no-check",
        action="store_true",
        help="skip the last step: the model compiled with and without the records, run and "
        "timed against itself",
    )
    add_model_options(t)
    add_database_options(t)
    t.set_defaults(execute=execute)


def add_database_options(t: argparse.ArgumentParser) -> None:
    t.add_argument("--db", metavar="FILE", help=f"the tuning database (default: {default_path()})")
    t.add_argument(
        "--show", action="store_true", help="list the best record of each kernel and target"
    )
    t.add_argument("--export", metavar="OUT.json", help="write every record to a JSON file")
    t.add_argument(
        "--merge",
        metavar="FILE",
        action="append",
        default=[],
        help="add the records of another database or JSON export (repeatable)",
    )


def execute(args: argparse.Namespace) -> int:
    if args.model:
        from polyonnx.tune.tuner import tune

        report = tune(
            args.model,
            budget=args.budget,
            db=args.db,
            threads=args.threads,
            ray=args.ray,
            input_shapes=shapes(args),
            progress=not args.quiet,
            seed=args.seed,
            timeout=args.timeout,
            model_kind=args.cost_model,
        )
        print(report)
        if not args.no_check and report.measured:
            from polyonnx.bench.tuned import check_tuned

            options = Options(num_threads=args.threads) if args.threads else Options()
            print(check_tuned(args.model, report.database, options, shapes(args)))
    db = TuningDatabase(args.db or default_path())
    with db:
        for source in args.merge:
            print(f"merged {source}: {db.merge(source)} new or better records")
        if args.export:
            print(f"wrote {db.export(args.export)} records to {args.export}")
        if args.show or not (args.merge or args.export or args.model):
            print(show(db.best_records(), str(db.path)))
    return 0


def show(records: list[Record], where: str) -> str:
    """The records as a table, grouped by target."""
    if not records:
        return f"{where}: no records"
    lines = [f"{where}: {len(records)} tuned kernel(s)"]
    by_target: dict[str, list[Record]] = {}
    for r in records:
        by_target.setdefault(str(r.target), []).append(r)
    for target, rs in sorted(by_target.items()):
        lines.append(f"target {target}")
        lines.append(f"  {'kernel':<24} {'signature':<16} {'speed-up':>8} {'time':>10}  version")
        for r in sorted(rs, key=lambda r: r.kernel):
            lines.append(
                f"  {r.kernel:<24} {r.signature:<16} {r.speedup:>7.2f}x "
                f"{r.time_s * 1e3:>8.3f}ms  {r.version}"
            )
    return "\n".join(lines)
