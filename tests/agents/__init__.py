"""Tests for ors_lab.agents."""
