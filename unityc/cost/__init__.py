"""The cost model: compute (roofline or profiled), communication (alpha-beta collectives),
memory, and a simulated iteration time. Layer (a), pure functions over small values:
`compute`, `communication`, `memory`, `schedule`; layer (b), the adapter from an xDSL module:
`estimate`; `report` prints an Estimate."""
