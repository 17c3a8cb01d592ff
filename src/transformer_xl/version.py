"""The package version: a leaf module, so that any layer (the saved files' metadata, ``txl --version``) can read it."""

__version__ = "0.1.0"
