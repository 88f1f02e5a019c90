"""Canonicalization patterns, kept apart from the dialects and imported lazily."""

from __future__ import annotations

import importlib

from xdsl.pattern_rewriter import RewritePattern
from xdsl.traits import HasCanonicalizationPatternsTrait


def canonicalization(module: str, *names: str) -> HasCanonicalizationPatternsTrait:
    """The trait giving an op the patterns `names` of `unityc.dialects.canonicalization.<module>`."""

    class Patterns(HasCanonicalizationPatternsTrait):
        @classmethod
        def get_canonicalization_patterns(cls) -> tuple[RewritePattern, ...]:
            patterns = importlib.import_module(f"unityc.dialects.canonicalization.{module}")
            return tuple(getattr(patterns, n)() for n in names)

    return Patterns()
