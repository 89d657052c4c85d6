"""Tests of the repository itself: docs, README, lint, the import graph, the tests' own layout."""
