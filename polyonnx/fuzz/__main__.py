"""``python -m polyonnx.fuzz``: a fuzzing campaign (see :mod:`polyonnx.fuzz`)."""

import sys

from polyonnx.fuzz.campaign import main

if __name__ == "__main__":
    sys.exit(main())
