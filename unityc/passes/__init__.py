"""xDSL module passes of unityc."""
