"""Graph → graph passes, and fusion grouping.

Example:
    >>> from polyonnx.frontend import import_model
    >>> from polyonnx.testing.examples import conv_model
    >>> g = optimize(import_model(conv_model()))
    >>> [[n.op_type for n in group.nodes] for group in fuse(g)]
    [['Conv', 'Relu']]
"""

from __future__ import annotations

from polyonnx.graph.ir import Graph
from polyonnx.graph.passes.affine import batchnorm_to_affine, merge_affine
from polyonnx.graph.passes.bn_fold import fold_batchnorm
from polyonnx.graph.passes.cse import eliminate_common_subexpressions
from polyonnx.graph.passes.dce import eliminate_dead_code
from polyonnx.graph.passes.dead_taps import trim_dead_taps
from polyonnx.graph.passes.deconv import deconv_as_columns
from polyonnx.graph.passes.dense import conv_as_gemm
from polyonnx.graph.passes.fake_quant import fold_quantize_pairs, unfold_quantizers
from polyonnx.graph.passes.fold import DEFAULT_MAX_BYTES, fold_constants
from polyonnx.graph.passes.fuse import Group, fuse
from polyonnx.graph.passes.pad_fold import fold_pads_into_convs
from polyonnx.graph.passes.qlinear import qdq_as_bytes, qlinear_as_float
from polyonnx.graph.passes.simplify import remove_identities
from polyonnx.graph.passes.transpose_sink import sink_transposes
from polyonnx.graph.passes.verify import verify

__all__ = [
    "Group",
    "batchnorm_to_affine",
    "conv_as_gemm",
    "deconv_as_columns",
    "eliminate_common_subexpressions",
    "eliminate_dead_code",
    "fold_batchnorm",
    "fold_constants",
    "fold_pads_into_convs",
    "fold_quantize_pairs",
    "fuse",
    "merge_affine",
    "optimize",
    "qdq_as_bytes",
    "qlinear_as_float",
    "remove_identities",
    "sink_transposes",
    "trim_dead_taps",
    "unfold_quantizers",
    "verify",
]


def optimize(graph: Graph, max_fold_bytes: int = DEFAULT_MAX_BYTES, dot4: bool = False) -> Graph:
    """Fold constants, compute quantized Conv/MatMul in float where that is exact
    (:mod:`~polyonnx.graph.passes.qlinear`), remove Identity/Dropout, sink Transposes below
    the ops that read them until they cancel (:mod:`~polyonnx.graph.passes.transpose_sink`),
    remove repeated nodes (:mod:`~polyonnx.graph.passes.cse`), turn quantize-dequantize pairs
    into float ops (:mod:`~polyonnx.graph.passes.fake_quant`), fold zero Pads into the
    convolutions that read them (:mod:`~polyonnx.graph.passes.pad_fold`), fold
    BatchNormalization into Conv and ConvTranspose (any other becomes a per-channel
    multiply-add, merged with the multiplications and additions by constants around it),
    compute ConvTransposes as a 1x1 Conv and an overlap-add
    (:mod:`~polyonnx.graph.passes.deconv`), cut convolution taps that read only padding
    (:mod:`~polyonnx.graph.passes.dead_taps`), drop dead code.

    ``dot4``: the target has a byte dot product: quantized MatMuls, QDQ ones included
    (:func:`~polyonnx.graph.passes.qlinear.qdq_as_bytes`), sum bytes with it.

    Constant folding runs first because BN folding needs constant Conv weights (models such as
    the ONNX "light" zoo build them with ConstantOfShape).

    Example:
        >>> from polyonnx.frontend import import_model
        >>> from polyonnx.testing.examples import conv_model
        >>> [n.op_type for n in optimize(import_model(conv_model())).nodes]
        ['Conv', 'Relu']
    """
    if dot4:  # (before constant folding turns the weights' DequantizeLinear into floats)
        graph = qdq_as_bytes(graph)
    graph = fold_constants(graph, max_fold_bytes)
    graph = sink_transposes(remove_identities(qlinear_as_float(graph, dot4)))
    graph = unfold_quantizers(fold_quantize_pairs(eliminate_common_subexpressions(graph)))
    # BatchNormalization folds into a ConvTranspose's weights before those are regrouped.
    graph = deconv_as_columns(fold_batchnorm(fold_pads_into_convs(graph)))
    graph = merge_affine(batchnorm_to_affine(graph))
    graph = trim_dead_taps(graph)
    return eliminate_dead_code(graph)
