"""``polyonnx tune``: list, export and merge tuning databases."""

from __future__ import annotations

import argparse

from polyonnx.cli.arguments import RAW, Subparsers
from polyonnx.tune.database import Record, TuningDatabase, default_path

EXAMPLES = """\
examples:
  polyonnx tune --show                          the best record of every kernel and target
  polyonnx tune --show --db tuning.sqlite
  polyonnx tune --export records.json           write the records to JSON
  polyonnx tune --merge other.sqlite            add another database's (or export's) records
"""


def add_parser(sub: Subparsers) -> None:
    t = sub.add_parser(
        "tune",
        help="show, export or merge tuning databases",
        description="Show, export or merge the tuning database (by default tuning.sqlite\n"
        "beside the compile cache), whose records compile and run use.",
        epilog=EXAMPLES,
        formatter_class=RAW,
    )
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
    db = TuningDatabase(args.db or default_path())
    with db:
        for source in args.merge:
            print(f"merged {source}: {db.merge(source)} new or better records")
        if args.export:
            print(f"wrote {db.export(args.export)} records to {args.export}")
        if args.show or not (args.merge or args.export):
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
