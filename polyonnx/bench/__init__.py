"""Benchmark helpers: per-kernel profiles and timing utilities used by ``benchmarks/``."""
