"""The ors_lab version, written here and nowhere else (pyproject.toml reads it from this file)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
