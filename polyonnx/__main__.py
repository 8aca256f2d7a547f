"""``python -m polyonnx``: the ``polyonnx`` command."""

import sys

from polyonnx.cli import main

sys.exit(main())
