"""Op-family lowerings; importing this package registers them all."""

from polyonnx.krnl.lower import conv, data, elementwise, gemm, norm, pool  # noqa: F401
from polyonnx.krnl.lower import gather  # noqa: F401
from polyonnx.krnl.lower import slice  # noqa: F401
from polyonnx.krnl.lower import normalization  # noqa: F401
from polyonnx.krnl.lower import convtranspose  # noqa: F401
from polyonnx.krnl.lower import einsum  # noqa: F401
from polyonnx.krnl.lower import rnn  # noqa: F401
from polyonnx.krnl.lower import resize  # noqa: F401
