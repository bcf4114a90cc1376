"""Tests for ors_lab.demo."""
