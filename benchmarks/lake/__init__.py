"""Benchmarks of what readers of the lake tables see: how fresh the tables are."""
