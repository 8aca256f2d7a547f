"""Tuning schedules: building, running and timing a kernel under a schedule
(:mod:`polyonnx.tune.measure`)."""
