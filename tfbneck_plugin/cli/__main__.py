"""``python -m tfbneck_plugin.cli``: the ``tfbneck`` program."""
import sys

from .main import run

sys.exit(run())
