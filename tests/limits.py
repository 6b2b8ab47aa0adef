"""How long a test waits for a subprocess before calling it hung.

A guard against hangs, never a speed bound (speeds belong in benchmarks; tests/repo/test_no_wall_clock.py
keeps wall-clock assertions out of the suite). Generous because CI runs on a shared 2-core machine: with two
CI runs side by side and a load average of 14, a `tkc tune --dry-run` that takes about 20 s on a quiet
machine took over 300 s, and a 300 s guard failed the run.
"""

HANG_S = 1800  # seconds
