#!/usr/bin/env bash
# Session 19, calls 3 and 4: issue 15's row sweep (48 points, each tuned afresh with readonly-loads in the
# default pipeline), onto session 17's GEMM records (.sweep19/ seeded with them: the GEMM's PTX is
# md5-identical since session 17). Call 3: bash docs/bench/session19_call3.sh (fresh);
# call 4: SWEEP_PREV=.sweep19 bash docs/bench/session19_call3.sh after copying call 3's sweep15/ into .sweep19/.
set -uo pipefail
export SWEEP_PREV=${SWEEP_PREV:-.sweep19}
bash docs/bench/sweep15.sh --part rows --budget-s ${BUDGET_S:-540} --grace-s 10 >/tmp/sweep19.txt 2>&1
tail -70 /tmp/sweep19.txt
true
