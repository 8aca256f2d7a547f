"""Fuzzing: random valid graphs checked against onnxruntime, and corrupted models and feeds.

Three kinds of case:

* ``graph``: a random chain of supported ops (random shapes, attributes, broadcasting, dtypes)
  is compiled and run; its outputs must match onnxruntime's.
* ``model``: such a model with corrupted bytes or a corrupted field (an attribute, a dimension,
  a name, a type, a version) must compile and run, or be refused with a ``PolyonnxError``.
* ``feed``: a valid model run with a corrupted feed (dtype, shape, layout, alignment, NaN,
  non-arrays, names) must run, or be refused with an ``InputError``; when it runs, its outputs
  must equal those for a clean copy of the same data.

Every case runs in a worker process, so a crash or a hang is a reported failure, not a dead
campaign. Cases are made from a :class:`Draw` (a seeded ``random.Random`` here, hypothesis in
the tests), so a failure is reproduced by its kind and seed::

    python -m polyonnx.fuzz --cases 2000                 # a campaign: all kinds, seeds 0..1999
    python -m polyonnx.fuzz --kinds graph --seed 17 --cases 1 --show   # replay one case
"""

# The package: case (cases, draws, outcomes); builder and ops (growing a graph); graphs
# (``graph`` cases); corrupt (``model`` and ``feed`` cases); checker (running one); worker (in a
# process of its own); campaign (many, and the command).

from polyonnx.fuzz.campaign import KINDS, MAKERS, campaign, main
from polyonnx.fuzz.case import Case, Draw, Outcome, RandomDraw
from polyonnx.fuzz.checker import MAX_TENSOR_BYTES, check, compare
from polyonnx.fuzz.corrupt import corrupt_feeds, corrupt_model
from polyonnx.fuzz.graphs import random_graph
from polyonnx.fuzz.worker import Worker

__all__ = [
    "KINDS",
    "MAKERS",
    "MAX_TENSOR_BYTES",
    "Case",
    "Draw",
    "Outcome",
    "RandomDraw",
    "Worker",
    "campaign",
    "check",
    "compare",
    "corrupt_feeds",
    "corrupt_model",
    "main",
    "random_graph",
]
