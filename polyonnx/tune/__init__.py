"""Tuning schedules: search every kernel of a model for the fastest legal schedule on this
machine, and keep the results in the tuning database that ``compile`` reads.

``polyonnx.tune(model, budget="20m")`` runs :func:`polyonnx.tune.tuner.tune` (this package is
callable, so the package and the function share the name the issue and the docs use). Its
parts: :mod:`~polyonnx.records.database` (records) and :mod:`~polyonnx.records.lookup`
(compile's use of them), one layer below the compiler's driver, which asks them;
:mod:`~polyonnx.tune.space` (candidates), :mod:`~polyonnx.tune.runner` and
:mod:`~polyonnx.tune.ray_runner` (measuring), :mod:`~polyonnx.tune.costmodel`,
:mod:`~polyonnx.tune.tuner` (search and task scheduler), :mod:`~polyonnx.tune.measure`
(building and timing one schedule by hand).

Example::

    import polyonnx
    print(polyonnx.tune("model.onnx", budget="5m", threads=1))
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    """``polyonnx.tune`` is this package once any of its modules is imported (the import
    system sets the attribute), so the function of that name is reached by calling it."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from polyonnx.tune.tuner import tune

        return tune(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
