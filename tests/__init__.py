"""Tests for ors_lab (a package, so `tests.envs.*` and `tests.cutting_proxy` import from the repo root)."""
