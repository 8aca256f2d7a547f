"""Run the whole ONNX node suite through polyonnx.backend and summarise it.

    python -m tests.backend.run_suite                 # all cases, 2 workers, 60 s per case
    python -m tests.backend.run_suite -k reduce -v    # cases whose name contains "reduce"
    python -m tests.backend.run_suite --update        # rewrite expected_pass.txt
    python -m tests.backend.run_suite --kind all      # also the simple / pytorch-* model suites
    python -m tests.backend.run_suite --alone         # each case in a fresh process

Each case runs in a worker process; a case that crashes its worker or exceeds ``--timeout`` is
a failure and the worker is replaced, so one bad case never stops the run. The summary counts
pass / fail / unsupported per op family; the full result goes to ``last_run.json`` (read by
``test_backend.py::test_unlisted_passes`` to warn about passing cases missing from the list).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import sys
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from multiprocessing.connection import Connection, wait

from tests.backend import suite


def _worker(conn: Connection) -> None:
    # Failures in one case never leak into the next: each runs in a fresh try block.
    while True:
        try:
            name = conn.recv()
        except EOFError:
            return
        if name is None:
            return
        start = time.perf_counter()
        try:
            suite.run_case(name)
            status, detail = "pass", ""
        except BaseException as e:  # noqa: BLE001 - any failure is a result to report
            status = suite.classify(e)
            detail = f"{type(e).__name__}: {e}"[:2000]
            if status == "fail" and not isinstance(e, AssertionError):
                detail += "\n" + "".join(traceback.format_exception(e)[-3:])[:1500]
        conn.send((name, status, detail, time.perf_counter() - start))


class _Slot:
    def __init__(self, ctx: mp.context.BaseContext) -> None:
        self.conn, child = ctx.Pipe()
        # Not a daemon: the compiler may fork its own workers. It exits when the pipe closes.
        self.proc = ctx.Process(target=_worker, args=(child,))
        self.proc.start()
        child.close()
        self.task: str | None = None
        self.started = 0.0

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()
        self.conn.close()


def run(
    names: list[str], jobs: int, timeout: float, verbose: bool, alone: bool = False
) -> dict[str, dict]:
    ctx = mp.get_context("spawn")
    pending = list(reversed(names))
    slots = [_Slot(ctx) for _ in range(min(jobs, len(names)) or 1)]
    results: dict[str, dict] = {}

    def record(name: str, status: str, detail: str, seconds: float) -> None:
        results[name] = {"status": status, "detail": detail, "seconds": round(seconds, 3)}
        done = len(results)
        if verbose or status == "fail":
            first = detail.splitlines()[0][:160] if detail else ""
            print(f"[{done}/{len(names)}] {status:11s} {name} ({seconds:.2f}s) {first}", flush=True)
        elif done % 100 == 0:
            print(f"[{done}/{len(names)}]", flush=True)

    while pending or any(s.task for s in slots):
        _dispatch(slots, pending, ctx)
        busy = [s for s in slots if s.task]
        if not busy:
            continue
        now = time.perf_counter()
        left = min(s.started + timeout - now for s in busy)
        ready = wait([s.conn for s in busy], timeout=max(left, 0.01))
        for i, s in enumerate(slots):
            if s.task is None:
                continue
            # (a case that finished clears its slot's task; --alone then retires the worker)
            if _finished(s, ready, timeout, record) or (alone and s.task is None):
                s.kill()
                slots[i] = _Slot(ctx)
    for s in slots:
        with contextlib.suppress(BrokenPipeError, OSError):
            s.conn.send(None)
        s.proc.join(5)
        if s.proc.is_alive():
            s.kill()
    return results


def _dispatch(slots: list[_Slot], pending: list[str], ctx: mp.context.BaseContext) -> None:
    """The next pending case to every idle slot (a slot whose worker is gone gets a new one,
    and the case goes back to the queue)."""
    for i, s in enumerate(slots):
        if s.task is None and pending:
            s.task, s.started = pending.pop(), time.perf_counter()
            try:
                s.conn.send(s.task)
            except (BrokenPipeError, OSError):
                s.kill()
                pending.append(s.task)
                slots[i] = _Slot(ctx)


def _finished(
    s: _Slot, ready: list, timeout: float, record: Callable[[str, str, str, float], None]
) -> bool:
    """Record the busy slot's result if it came, or its crash or timeout; whether its worker
    must be replaced."""
    assert s.task is not None
    if s.conn in ready:
        try:
            name, status, detail, seconds = s.conn.recv()
        except (EOFError, OSError):
            code = s.proc.exitcode if not s.proc.is_alive() else None
            s.proc.join(1)
            record(
                s.task,
                "fail",
                f"worker crashed (exit code {s.proc.exitcode or code})",
                time.perf_counter() - s.started,
            )
            return True
        record(name, status, detail, seconds)
        s.task = None
        return False
    if time.perf_counter() - s.started > timeout:
        record(s.task, "fail", f"timeout after {timeout:.0f} s", time.perf_counter() - s.started)
        return True
    return False


def summarise(results: dict[str, dict]) -> str:
    by_family: dict[str, Counter] = defaultdict(Counter)
    by_op: dict[str, Counter] = defaultdict(Counter)
    cases = suite.all_cases()
    for name, r in results.items():
        op = suite.case_op(cases[name])
        r["op"] = op
        by_family[suite.family(op)][r["status"]] += 1
        by_op[op][r["status"]] += 1
    lines = [f"{'family':12s} {'pass':>5s} {'fail':>5s} {'unsup':>5s} {'total':>6s}"]
    total: Counter = Counter()
    for fam in sorted(by_family):
        c = by_family[fam]
        total.update(c)
        lines.append(
            f"{fam:12s} {c['pass']:5d} {c['fail']:5d} {c['unsupported']:5d} {sum(c.values()):6d}"
        )
    lines.append(
        f"{'TOTAL':12s} {total['pass']:5d} {total['fail']:5d} "
        f"{total['unsupported']:5d} {sum(total.values()):6d}"
    )
    return "\n".join(lines), by_op


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-k", default="", help="only cases whose name contains this substring")
    p.add_argument("-j", "--jobs", type=int, default=min(os.cpu_count() or 2, 2))
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--update", action="store_true", help="rewrite expected_pass.txt")
    p.add_argument("--ops", action="store_true", help="also print counts per op type")
    p.add_argument(
        "--kind",
        default="node",
        help="node (default), all, or a comma-separated list of node and "
        + ", ".join(suite.MODEL_KINDS),
    )
    p.add_argument("--alone", action="store_true", help="run each case in a fresh process (slower)")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)

    kinds = ("node", *suite.MODEL_KINDS) if args.kind == "all" else tuple(args.kind.split(","))
    names = [n for kind in kinds for n in suite.load_cases(kind) if args.k in n]
    start = time.perf_counter()
    results = run(names, args.jobs, args.timeout, args.verbose, args.alone)
    table, by_op = summarise(results)
    print(table)
    if args.ops:
        for op in sorted(by_op):
            c = by_op[op]
            print(
                f"  {op:28s} pass {c['pass']:3d}  fail {c['fail']:3d}  "
                f"unsupported {c['unsupported']:3d}"
            )
    print(f"{len(names)} cases in {time.perf_counter() - start:.0f} s")

    expected = set(suite.read_expected())
    passed = {n for n, r in results.items() if r["status"] == "pass"}
    regressions = sorted(n for n in expected & set(results) if n not in passed)
    new = sorted(passed - expected)
    if regressions:
        print(f"{len(regressions)} expected-pass case(s) no longer pass:")
        for n in regressions:
            print(f"  {n}: {results[n]['detail'].splitlines()[0][:160]}")
    if new:
        print(
            f"{len(new)} passing case(s) not in expected_pass.txt"
            + ("" if args.update else " (use --update)")
        )
    if not args.k:
        # Merged with earlier runs, so a node-only run keeps the model suites' results.
        merged = json.loads(suite.LAST_RUN_FILE.read_text()) if suite.LAST_RUN_FILE.exists() else {}
        merged.update(results)
        suite.LAST_RUN_FILE.write_text(json.dumps(merged, indent=1, sort_keys=True))
    if args.update:
        keep = expected - set(results)  # cases not run this time keep their status
        suite.EXPECTED_FILE.write_text("\n".join(sorted(keep | passed)) + "\n")
        print(f"wrote {suite.EXPECTED_FILE} ({len(keep | passed)} cases)")
    return 1 if regressions and not args.update else 0


if __name__ == "__main__":
    sys.exit(main())
