"""The package version, in a module of its own so any module can import it without a cycle."""

__version__ = "0.1.0"
