"""The IR: the `pcg` dialect (parallel tensors and tensor operators) and the
`parallel` dialect (operators that change a tensor's parallel degrees)."""

from unityc.dialects import float_literals as _float_literals  # noqa: F401  (hex float literals)
