"""Unity's joint search (OSDI'22 §5) on the compact `Graph`: graph splitting (`split.py`),
best-first substitution search (`substitution.py`), the machine-mapping dynamic program
(`mapping.py`, prices in `opcost.py`), orchestrated by `unity.py`; the baselines
(`baselines.py`), the plan report (`report.py`), the `dot` target (`dot.py`) and the
`unityc-opt` flags (`cli.py`). See README "Searching for a plan".

Entry point: `unityc.search.unity.unity_search(graph, machine, rules, UnityOptions(...))`. The
package itself imports nothing, so `unityc-opt` starts fast when no search is asked for.
"""
