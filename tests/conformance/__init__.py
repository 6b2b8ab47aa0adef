"""The conformance suite: generated kernels per (construct, context, dtype, target); see cases.py."""
