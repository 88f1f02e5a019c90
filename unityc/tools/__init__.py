"""Command-line tools: unityc-opt, unityc-run."""
