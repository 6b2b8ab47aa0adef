#!/usr/bin/env bash
# Session 10, call 5: the same steps as call 3 (the whole GPU suite, then issue 12's bench with the
# persistent choice tuned per row), run again after causal attention became persistent (rotated order)
# and the GPU suite gained persistent attention at the odd lengths. Results under $OUT.
exec bash "$(dirname "$0")/session10_call3.sh" "$@"
