"""Figures from results, pure: per-step aggregates, statistics, packet rates, verdicts, comparisons."""
