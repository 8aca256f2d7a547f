"""GEMM rows, and the child process that measures OpenBLAS without its overrides."""

from __future__ import annotations

import argparse
import os
import subprocess

import pytest

from polyonnx.bench import gemm
from polyonnx.bench.timing import Spread


def test_parse_shape():
    assert gemm.parse_shape("64") == (64, 64, 64)
    assert gemm.parse_shape("2x3X4") == (2, 3, 4)
    with pytest.raises(argparse.ArgumentTypeError, match="not N or MxNxK"):
        gemm.parse_shape("2x3")


def test_row_round_trips_through_json():
    row = gemm.Row(2, 3, 4, 1, 0.5, Spread(1.0, 0.5, 2.0, 3), Spread(2.0, 1.0, 3.0, 3), 0.0)
    assert gemm.Row.from_json(row.to_json()) == row
    assert row.flops == 48 and row.ratio == 2.0


def test_measure_apart_unsets_the_openblas_overrides_only_in_the_child(monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.setenv("OPENBLAS_L2_SIZE", "1048576")
    seen = {}
    real = subprocess.run

    def run(cmd, env, check):
        seen.update(env)
        return real(cmd, env=env, check=check)

    monkeypatch.setattr(subprocess, "run", run)
    (row,) = gemm.measure_apart([(8, 16, 4)], threads=1, repeat=3, budget_s=0.5)
    assert "OPENBLAS_CORETYPE" not in seen and "OPENBLAS_L2_SIZE" not in seen
    assert seen["OPENBLAS_NUM_THREADS"] == "1"
    assert (row.m, row.n, row.k, row.threads) == (8, 16, 4, 1)
    assert row.max_rel_err < 1e-5 and row.polyonnx.rounds == row.numpy.rounds >= 3
    assert os.environ["OPENBLAS_CORETYPE"] == "Haswell"  # this process keeps them
