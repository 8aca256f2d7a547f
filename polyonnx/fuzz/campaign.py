"""Campaigns: cases from consecutive seeds, kinds taking turns, checked in a worker; and the
``python -m polyonnx.fuzz`` command."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

import onnx

from polyonnx.fuzz.case import Case, Draw, Outcome, RandomDraw
from polyonnx.fuzz.corrupt import corrupt_feeds, corrupt_model
from polyonnx.fuzz.graphs import random_graph
from polyonnx.fuzz.worker import Worker, heap_check_interpreter, heap_checks_catch_overruns

#: How each kind of case is made from a draw.
MAKERS: dict[str, Callable[[Draw], Case]] = {
    "graph": random_graph,
    "model": corrupt_model,
    "feed": corrupt_feeds,
}

KINDS = tuple(MAKERS)


def campaign(
    kinds: Sequence[str],
    cases: int,
    seed: int,
    seconds: float | None,
    show: bool = False,
    timeout: float = 120.0,
    heap_checks: bool = False,
) -> int:
    """Run cases ``seed .. seed + cases - 1`` (kinds taking turns); print a summary.

    ``heap_checks`` runs the worker under glibc's heap checks (:class:`Worker`): a worker
    that aborts when it exits counts as one more failure.

    Returns the number of failures.
    """
    counts: dict[str, int] = {}
    failures: list[tuple[str, int, Case | None, Outcome]] = []
    start = time.monotonic()
    tried = 0
    worker = Worker(timeout, heap_checks=heap_checks)
    with worker:
        for i in range(cases):
            if seconds is not None and time.monotonic() - start > seconds:
                break
            kind = kinds[i % len(kinds)]
            case = MAKERS[kind](RandomDraw(seed + i))
            outcome = worker.check(case)
            tried += 1
            counts[outcome.status] = counts.get(outcome.status, 0) + 1
            if show:
                print(f"[{kind} seed {seed + i}] {case.label}")
                if case.kind != "model":
                    try:
                        m = onnx.ModelProto()
                        m.ParseFromString(case.model)
                        print(onnx.printer.to_text(m.graph))
                    except Exception:  # noqa: BLE001 - corrupt bytes have no text form
                        pass
                print(f"  -> {outcome.status} {outcome.detail}")
            if outcome.failed:
                failures.append((kind, seed + i, case, outcome))
                print(
                    f"FAIL {kind} seed {seed + i}: {outcome.status}: {outcome.detail}\n"
                    f"     case: {case.label}",
                    flush=True,
                )
            if tried % 100 == 0:
                print(
                    f"... {tried} cases, {len(failures)} failures, "
                    f"{time.monotonic() - start:.0f} s",
                    flush=True,
                )
    for code in worker.bad_exits:
        failures.append(("exit", -1, None, Outcome("crash", f"worker exit code {code}")))
        print(f"FAIL a worker exited with code {code} after its last case", flush=True)
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    print(
        f"cases tried: {tried} ({summary}); failures: {len(failures)}; "
        f"{time.monotonic() - start:.0f} s"
    )
    for kind, s, _, _ in failures:
        if s < 0:
            continue
        print(f"  replay: python -m polyonnx.fuzz --kinds {kind} --seed {s} --cases 1 --show")
    return len(failures)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m polyonnx.fuzz``: exit status 1 when any case failed."""
    p = argparse.ArgumentParser(
        prog="python -m polyonnx.fuzz",
        description=sys.modules[__package__].__doc__,  # polyonnx.fuzz's
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--cases", type=int, default=1000, help="number of cases (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the first case (default 0)")
    p.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help=f"comma-separated kinds among {', '.join(KINDS)} (default all)",
    )
    p.add_argument("--seconds", type=float, help="stop after this long")
    p.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds one case may take before it counts as a hang (default 120)",
    )
    p.add_argument("--show", action="store_true", help="print every case and its outcome")
    p.add_argument(
        "--heap-checks",
        action="store_true",
        help="run the worker under glibc's heap checks (MALLOC_CHECK_=3, MALLOC_PERTURB_)",
    )
    args = p.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        p.error(f"unknown kinds {unknown}; choose among {', '.join(KINDS)}")
    if args.heap_checks and not heap_checks_catch_overruns():
        found = heap_check_interpreter()
        if found is not None:
            print(
                f"heap checks: glibc's debugging malloc does not work with {sys.executable}; "
                f"the campaign runs under {found.executable}",
                flush=True,
            )
            command = [found.executable, "-m", "polyonnx.fuzz", *(argv or sys.argv[1:])]
            env = {**os.environ, **dict(found.environment)}
            return subprocess.run(command, env=env, check=False).returncode
        print("heap checks: MALLOC_PERTURB_ only (no interpreter here runs the debugging malloc)")
    failed = campaign(
        kinds, args.cases, args.seed, args.seconds, args.show, args.timeout, args.heap_checks
    )
    return 1 if failed else 0
