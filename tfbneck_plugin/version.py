"""The package version: a leaf module that imports nothing (setup.py reads it)."""
__version__ = "0.1.0"
