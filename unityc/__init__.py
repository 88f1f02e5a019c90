"""unityc: a Unity-style compiler for distributed DNN training, built on xDSL."""

__version__ = "0.1.0"
