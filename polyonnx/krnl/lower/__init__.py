"""Op-family lowerings; importing this package registers them all.

Add a family by appending its module to the list below (one name per line, kept sorted).
"""

from polyonnx.krnl.lower import (  # noqa: F401
    attention,
    blocked,
    cast,
    col2im,
    conv,
    convtranspose,
    data,
    dynamic,
    einsum,
    elementwise,
    gather,
    gemm,
    linalg,
    logical,
    loss,
    nms,
    norm,
    normalization,
    pool,
    qconv,
    quant,
    quantize,
    reduce,
    resize,
    rnn,
    roi,
    sample,
    slice,
    spectral,
    strings,
    topk,
    winograd,
)
