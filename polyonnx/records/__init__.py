"""Tuning records: the database of schedules the autotuner measured (:mod:`.database`) and
their use when a model compiles (:mod:`.lookup`: the best record of each kernel for this
target, replayed and proved legal).

Below the schedule driver, which asks it for each kernel; the search that writes the records
is :mod:`polyonnx.tune`.
"""
