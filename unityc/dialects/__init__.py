"""The IR: the `pcg` dialect (parallel tensors and tensor operators) and the
`parallel` dialect (operators that change a tensor's parallel degrees)."""
