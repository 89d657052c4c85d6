"""Tests that keep benchmarks/ working (tiny runs)."""
