"""Tests that keep examples/ working (their fast mode)."""
