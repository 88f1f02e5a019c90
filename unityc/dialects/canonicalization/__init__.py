"""Canonicalization patterns, kept apart from the dialects and imported lazily."""
