"""The mutation table of scripts/mutate.py: each entry one single-line change to the code, what it breaks, and
the tests that should notice it.

`MUTANTS` is one list. The `core` entries (first the eight classes of mistake a CPU run used to miss, the
`klass` of each, then others of the pipeline and backend) run against mutate.py's DEFAULT_TESTS; the
targeted entries, grouped by `topic`, each name the tests that touch the code they change (mostly a `-k`
selection), so a topic runs in minutes: `python3 scripts/mutate.py --named --topic cluster`.
docs/mutation.md has what killed each and the tests added for the ones that survived a first round.
tests/tools/test_mutation.py checks that every entry still finds its snippet (once, or its stated occurrence)
and that a mutated Python file still compiles, so the table cannot rot silently as the code changes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    """One single-line change: `old` (unique in `path`, or its `occurrence`-th match) becomes `new`."""

    id: str
    path: str
    old: str
    new: str
    what: str
    klass: str = ""           # the class of mistake a CPU run used to miss, or "" for the others
    occurrence: int = 0       # 0: `old` must occur exactly once; n: the n-th of several
    line: int = 0             # --auto: the 1-based line (old/new are then the token and its mutant)
    col: int = 0              # --auto: the token's column
    tests: tuple[str, ...] = ()  # the pytest arguments that should kill it; () = the run's (DEFAULT_TESTS)
    topic: str = "core"       # what it belongs to (`mutate.py --named --topic T`; docs/mutation.md's sections)
    # the GPU runs (pytest arguments, run with `-m gpu`, in order) of `mutate.py --gpu` for this mutant where
    # GPU_RUNS would miss the tests that see it (e.g. tests/passes/test_row_stats.py's GPU cases); () = GPU_RUNS
    gpu_tests: tuple[tuple[str, ...], ...] = ()

    def apply(self, text: str) -> str:
        """The mutated text; ValueError when the snippet is not where it should be."""
        if self.line:
            lines = text.splitlines(keepends=True)
            ln = lines[self.line - 1]
            if ln[self.col:self.col + len(self.old)] != self.old:
                raise ValueError(f"{self.path}:{self.line}:{self.col}: expected {self.old!r}")
            lines[self.line - 1] = ln[:self.col] + self.new + ln[self.col + len(self.old):]
            return "".join(lines)
        n = text.count(self.old)
        if self.occurrence == 0 and n != 1:
            raise ValueError(f"{self.path}: {self.old!r} occurs {n} times, not once")
        if self.occurrence > n:
            raise ValueError(f"{self.path}: {self.old!r} occurs {n} times, not {self.occurrence}")
        at = -1
        for _ in range(max(self.occurrence, 1)):
            at = text.index(self.old, at + 1)
        if "\n" in self.old or "\n" in self.new:
            raise ValueError(f"{self.id}: a mutation changes one line")
        return text[:at] + self.new + text[at + len(self.old):]


M = Mutation

# The pytest arguments of the targeted mutants below, one tuple per group (-k narrows a file to the tests
# that touch the mutated code; each mutant runs only its group, in a fresh copy, stopping at the first failure).
T_SM80_PRODUCERS = ("tests/filecheck/test_filecheck.py", "tests/ir/test_pipeline_interp.py",
                    "tests/passes/test_occupancy.py", "tests/backend/test_backend_sass.py",
                    "tests/backend/test_backend_sm80.py", "tests/runtime/test_runtime.py",
                    "tests/passes/test_persistent_grid.py", "-k",
                    "sm80 or producer or pipeline or interp or aligned or occupancy or persistent or deadlock")
T_HOIST_FILECHECK = ("tests/filecheck/test_filecheck.py", "-k", "hoist or idle")
T_CHUNK_WARPS = ("tests/filecheck/test_filecheck.py", "-k", "chunk-warps")
T_RED_VEC = ("tests/filecheck/test_filecheck.py", "tests/backend/test_reduce_store_simulated.py",
             "tests/backend/test_reduce_store_backend.py", "-k", "vector-red or added_once or adds")
T_CHUNK_SASS = ("tests/backend/test_backend_sass.py", "-k", "chunk_loop or class_of")
T_TUNE_LONE = ("tests/tools/test_tune.py", "-k", "lone")
T_BENCH_LEAD = ("tests/tools/test_bench.py", "-k", "lead")
T_HOIST_DIAGNOSTICS = ("tests/frontend/test_diagnostics.py", "-k", "hoist")
# tests/data/rows/rmsnorm.tk's chunk loop (the pass-test copy), against the reference in the one-block oracle
T_RMSNORM_CHUNKS = ("tests/backend/test_block_eval_rows.py", "tests/ir/test_new_examples.py", "-k", "rmsnorm")
T_BOUNDS = ("tests/ir/test_bounds.py", "tests/filecheck/test_filecheck.py", "-k",
            "bounds or largest or grid or unknown or edge")
T_EDGE_FILECHECK = ("tests/filecheck/test_filecheck.py", "-k", "edge")
T_VECTOR_RUNTIME = ("tests/runtime/test_runtime.py", "-k", "4_and_8")
T_BASED_SHIFT = ("tests/ir/test_based.py", "-k", "emitted_outer")
T_WIDE_ROWS = ("tests/passes/test_wide_rows.py",)
T_CACHE_FILECHECK = ("tests/filecheck/test_filecheck.py", "-k", "cache-policy")
T_CACHE_BACKEND = ("tests/filecheck/test_filecheck.py", "tests/backend/test_backend_sass.py",
                   "tests/runtime/test_runtime.py", "-k",
                    "cache-policy or cache_policy or 4_and_8 or sm80_with_ptx")
T_CONTRACT_FMA = ("tests/filecheck/test_filecheck.py", "-k", "contract")
T_TUNE_OCC = ("tests/frontend/test_blocks_per_sm.py", "-k", "tune_occ")
T_SM80_COPY = ("tests/backend/test_backend_sm80.py", "tests/filecheck/test_filecheck.py", "-k",
               "pipelined_copy or sm80")
T_CP_ASYNC_RUNS = ("tests/passes/test_pipeline_cp_async.py", "tests/filecheck/test_filecheck.py", "-k",
                   "loop_sass or sm80-pipeline")
T_PRODUCER_RULE = ("tests/passes/test_occupancy.py", "-k", "producer or one_role_at_equal")
T_BENCH = ("tests/tools/test_bench.py",)
T_FENCE_FILECHECK = ("tests/filecheck/test_filecheck.py", "-k", "fence")
T_FENCE_LOADS = ("tests/passes/test_fence_loads.py",)
T_SIZE_RULES = ("tests/filecheck/test_filecheck.py", "tests/passes/test_fence_loads.py", "-k", "size-rule or size_rule")
T_ROW_WARPS = ("tests/filecheck/test_filecheck.py", "-k", "row-warps or size-rule")
T_CARRIED_WARPS = ("tests/filecheck/test_filecheck.py", "-k", "carried-warps")
T_AUTO_FEW_BLOCKS = ("tests/tools/test_auto_consts.py", "-k", "one_block_per_sm")
T_COLUMN_SCRATCH = ("tests/passes/test_column_scratch.py", "tests/filecheck/test_filecheck.py", "-k",
                    "scratch or column")
T_TUNE_ROUNDS = ("tests/tools/test_tune.py", "-k", "timed_again or same_code")
T_TUNE_SAME = ("tests/tools/test_tune.py", "-k", "same_code or another_launch")
T_REREAD = ("tests/passes/test_wide_rows.py", "-k", "reread")
T_READONLY_FILECHECK = ("tests/filecheck/test_filecheck.py", "-k", "readonly-loads")
T_READONLY_SASS = ("tests/backend/test_backend_sass.py", "-k", "readonly")
T_READONLY_RUNTIME = ("tests/runtime/test_runtime.py", "-k", "readonly")
T_READONLY_C = ("tests/backend/test_emit_c.py", "-k", "test_c_launch_makes_the_runtimes_calls and softmax")
T_TUNE_SECOND_ROUND = ("tests/tools/test_tune.py", "-k", "timed_again")
T_ROW_STATS = ("tests/passes/test_row_stats.py",)
T_FUSE_FILECHECK = ("tests/filecheck/test_filecheck.py", "-k", "fuse-row-stats")
T_CLUSTER_FILECHECK = ("tests/filecheck/test_filecheck.py", "-k", "cluster-rows")
T_CLUSTER_ROWS = ("tests/passes/test_cluster_rows.py",)
T_MULTICAST = ("tests/filecheck/test_filecheck.py", "-k", "multicast")
T_PIPELINE_PROTOCOL = ("tests/backend/test_mutation_kills.py", "tests/ir/test_verify_pipeline.py", "-k",
                       "mbarrier_pipeline_protocol or model_runs")
# audit3: 25 single-line mutations of descriptor bits, barrier parity and releases, stage indices, masks, split
# bounds, persistent rounds, reductions, swizzle and bank choices, cp.async groups, overlap-mma and the verifier
T_A3_DESC = ("tests/backend/test_wgmma_desc.py", "tests/backend/test_mutation_kills.py", "-k",
             "descriptor or wgmma_reads or layout_type")
T_A3_PIPE = ("tests/backend/test_mutation_kills.py", "tests/ir/test_verify_pipeline.py",
             "tests/filecheck/test_filecheck.py", "tests/passes/test_persistent_once.py", "-k",
             "mbarrier or model_runs or release or pipe or persistent or ring_stages")
T_A3_SPLIT = ("tests/passes/test_split_masks_bounds.py", "tests/backend/test_mutation_kills.py",
              "tests/filecheck/test_filecheck.py", "-k", "split or causal or attention")
T_A3_STREAMK = ("tests/passes/test_stream_k.py", "tests/backend/test_stream_k_partials.py",
                "tests/filecheck/test_filecheck.py", "-k", "stream or own_part")
T_A3_PERSISTENT = ("tests/passes/test_persistent_grid.py", "tests/passes/test_persistent_rotated.py",
                   "tests/passes/test_persistent_once.py", "tests/ir/test_verify_pipeline.py",
                   "tests/filecheck/test_filecheck.py", "-k", "persistent or grid or rotated or model_runs or once")
T_A3_ROWS = ("tests/backend/test_mutation_kills.py", "tests/passes/test_row_stats.py", "tests/passes/test_wide_rows.py",
             "tests/filecheck/test_filecheck.py", "tests/backend/test_block_eval_rows.py", "-k",
             "row or stats or layernorm or rmsnorm or softmax or welford")
# the GPU runs that also see the reductions' cross-lane and cross-warp merges (the CPU sees them through the
# one-block oracle, tests/backend/test_block_eval_rows.py): tests/passes/test_row_stats.py's kernel has rows
# split over warps (the exchange) and a butterfly Welford merge
G_A3_ROWS = (("tests/passes/test_row_stats.py",),
             ("tests/gpu/test_gpu_examples.py", "-k", "softmax or layernorm or rmsnorm"),
             ("tests/conformance/test_conformance_gpu.py", "-k", "row_"))
T_A3_SWIZZLE = ("tests/backend/test_mutation_kills.py", "tests/filecheck/test_filecheck.py",
                "tests/ir/test_layout_props.py", "-k", "swizzle or bank")
T_A3_CP_ASYNC = ("tests/ir/test_verify_pipeline.py", "tests/passes/test_pipeline_cp_async.py",
                 "tests/filecheck/test_filecheck.py", "-k", "cp_async or cp-async or model_runs or sm80-pipeline")
T_A3_CP_LOAD = ("tests/backend/test_backend_sm80.py", "tests/filecheck/test_filecheck.py", "-k",
                "landed or (sm80 and not pipeline)")
T_A3_VERIFY = ("tests/ir/test_verify_pipeline.py",)
T_A3_OVERLAP = ("tests/ir/test_verify_pipeline.py", "tests/filecheck/test_filecheck.py",
                "tests/passes/test_overlap_hazard.py", "-k", "overlap or model_runs or hazard")

MUTANTS: list[Mutation] = [
    # --- core: the eight classes of mistake a CPU run used to miss (each must be killed), then others ---------
    # wgmma descriptor: layout-type code (bits 63-62: 0 none, 1 128B, 2 64B, 3 32B; PTX ISA §9.7.15.5.1.2.2)
    M("desc-code-64-32-swapped", "backend/wgmma_desc.py", "128: 1, 64: 2, 32: 3", "128: 1, 64: 3, 32: 2",
      "64B and 32B descriptors carry each other's layout-type code", "wgmma descriptor swizzle code"),
    M("desc-code-128-as-64", "backend/wgmma_desc.py", "128: 1, 64: 2, 32: 3", "128: 2, 64: 2, 32: 3",
      "128B descriptors say 64B", "wgmma descriptor swizzle code"),
    M("desc-code-bit-61", "backend/rules_wgmma.py", "wgmma_desc.LAYOUT_CODE[swizzle] << 62",
      "wgmma_desc.LAYOUT_CODE[swizzle] << 61", "the layout type lands in bits 62-61", "wgmma descriptor swizzle code"),
    # trans-b immediate: 0 = K-major, 1 = N-major (B stored K x N)
    M("trans-b-const-1", "backend/rules_wgmma.py", "int(trans_b is False)", "1",
      "imm-trans-b always 1: a K-major B (q @ k.T, x @ w.T) is read as N-major", "B-transpose flag"),
    M("trans-b-inverted", "backend/rules_wgmma.py", "int(trans_b is False)", "int(trans_b is True)",
      "imm-trans-b inverted", "B-transpose flag"),
    M("trans-b-rs-const-1", "backend/rules_wgmma.py", "${k + 4}, 1, 1, 1, {trans_b};", "${k + 4}, 1, 1, 1, 1;",
      "register-A wgmma: imm-trans-b always 1", "B-transpose flag"),
    # row reduction: lanes that share a row
    M("reduce-quad-8-lanes", "backend/fragments.py", "return QUAD, QUAD", "return 2 * QUAD, QUAD",
      "accumulator rows reduced over 8 lanes instead of the quad (mixes rows g and g+1)", "row-reduction lane count"),
    M("reduce-row-16-lanes", "backend/fragments.py", "n = min(cpr, WARP)", "n = min(cpr, WARP // 2)",
      "a row of 32+ chunks reduced over 16 lanes only", "row-reduction lane count"),
    # the butterfly loop
    M("shuffle-loop-le", "backend/rules_registers.py", "while step < lanes:", "while step <= lanes:",
      "one butterfly step too many (combines the next row group)", "shuffle loop"),
    M("shuffle-loop-step-4", "backend/rules_registers.py", "            step *= 2", "            step *= 4",
      "butterfly offsets 1, 4, 16: half the lanes skipped", "shuffle loop"),
    M("shuffle-loop-start-2", "backend/rules_registers.py", "        step = 1", "        step = 2",
      "butterfly starts at offset 2: adjacent lanes never combined", "shuffle loop"),
    M("shuffle-clamp-15", "backend/exchange.py", '("i32", str(step)), ("i32", "31")',
      '("i32", str(step)), ("i32", "15")', "shfl.bfly c = 15: lanes 16-31 read their own value", "shuffle loop"),
    # swizzle masks (tkir/layout.py is the one owner; backend/fragments.py and the passes import it)
    M("swizzle-mask-32", "tkir/layout.py", "32: 0x10", "32: 0x20",
      "32B swizzle XORs address bit 5 with bit 8 instead of bit 4 with bit 7", "32B swizzle mask"),
    M("swizzle-mask-64", "tkir/layout.py", "64: 0x30", "64: 0x10",
      "64B swizzle XORs one bit instead of two", "32B swizzle mask"),
    M("swizzle-shift-4", "backend/fragments.py", "SWIZZLE_SHIFT = 3", "SWIZZLE_SHIFT = 4",
      "backend swizzle formula shifts by 4", "32B swizzle mask"),
    # TMA box limit: boxDim[i] in [1, 256] (cuTensorMapEncodeTiled)
    M("tma-box-rows-ge", "passes/create_tma.py", "if rows > TMA_MAX_BOX:", "if rows >= TMA_MAX_BOX:",
      "a 256-row tile is refused TMA", "TMA box-size boundary"),
    M("tma-box-rows-plus-16", "passes/create_tma.py", "if rows > TMA_MAX_BOX:", "if rows > TMA_MAX_BOX + 16:",
      "a 257..272-row box is given to TMA", "TMA box-size boundary"),
    M("tma-box-inner-plus-8", "passes/create_tma.py", "if inner > TMA_MAX_BOX:", "if inner > TMA_MAX_BOX + 8:",
      "an inner box of 257..264 elements is given to TMA", "TMA box-size boundary"),
    M("tma-box-limit-512", "tkir/target.py", "TMA_MAX_BOX = 256 ", "TMA_MAX_BOX = 512 ",
      "the box limit itself doubled (create-tma and the verifier)", "TMA box-size boundary"),
    # bank conflicts: fix every access above degree 1
    M("bank-threshold-2", "passes/bank_conflicts.py", "max(degrees, default=1) > 1", "max(degrees, default=1) > 2",
      "2-way conflicts are left unfixed", "bank-conflict threshold"),
    # shared memory reserved per block (1 KB, CUDA occupancy calculator / HOPPER.md §7.3)
    M("smem-reserve-512", "tkir/target.py", "SMEM_RESERVED_PER_BLOCK = 1024",
      "SMEM_RESERVED_PER_BLOCK = 512", "512 B reserved per block: one block too many at the boundary",
      "shared-memory reserve"),
    M("smem-reserve-2k", "tkir/target.py", "SMEM_RESERVED_PER_BLOCK = 1024",
      "SMEM_RESERVED_PER_BLOCK = 2048", "2 KB reserved per block: one block too few at the boundary",
      "shared-memory reserve"),
    # --- beyond the eight classes -------------------------------------------------------------------
    M("mbarrier-producer-parity", "passes/pipeline.py", '"arith.sub", [ring.one, phase]',
      '"arith.rem", [phase, ring.two]', "the producer waits on `empty` with the consumer's parity (deadlock)"),
    M("mbarrier-phase-per-iteration", "passes/pipeline.py", '"arith.rem", [rnd, ring.two]',
      '"arith.rem", [it, ring.two]', "the barrier phase flips every iteration instead of every round of the ring"),
    M("empty-count-per-warpgroup", "passes/pipeline.py", "cp_async else WARPS_PER_WARPGROUP * n_consumers",
      "cp_async else n_consumers", "`empty` completes after one warp per warpgroup arrives (stage reused early)"),
    M("expect-tx-max", "passes/pipeline.py", "return sum(int(ld.attrs.get(", "return max(int(ld.attrs.get(",
      "expect_tx counts only the largest load of a stage"),
    M("wait-group-plus-1", "backend/idioms.py", 'f"wgmma.wait_group.sync.aligned {n};"',
      'f"wgmma.wait_group.sync.aligned {n + 1};"', "wgmma.wait_group leaves one group too many in flight",
      occurrence=2),
    M("async-groups-2", "passes/pipeline.py", 'op.attrs["async_groups"] = 1', 'op.attrs["async_groups"] = 2',
      "two wgmma groups in flight while the stage of the older one is released"),
    M("setmaxnreg-direction", "backend/rules_pipe.py", 'which = "dec" if regs < cx.init_cap else "inc"',
      'which = "inc" if regs < cx.init_cap else "dec"', "producer increases, consumers decrease registers"),
    M("tma-panel-bytes", "backend/rules_pipe.py", "panel_bytes = t.rows * panel_cols * dtype_bytes(t.dtype)",
      "panel_bytes = t.rows * panel_cols", "TMA load boxes of a wide tile land half a panel apart", occurrence=1),
    M("fence-proxy-async-dropped", "backend/context.py",
      "            fence_async_proxy(self.w)", "            pass",
      "no generic-to-async proxy fence before wgmma/TMA reads of thread-written shared memory"),
    M("fence-staged-epilogue-dropped", "backend/idioms.py",
      'w.asm("void", ["fence.proxy.async.shared::cta;"], [], [])', "pass",
      "the staged epilogue's TMA store reads the stage without a proxy fence"),
    M("fence-cp-async-dropped", "backend/rules_sm80.py",
      "fence_async_proxy(w)  # wgmma", "pass  # wgmma",
      "--no-tma: wgmma reads cp.async-filled tiles without a proxy fence", occurrence=1),
    M("ldmatrix-b-trans", "backend/rules_sm80.py", "trans=not trans_b)", "trans=trans_b)",
      "sm_80: B fragments loaded with the wrong ldmatrix .trans"),
    M("cp-async-8-bytes", "backend/rules_sm80.py", 'asm = ["cp.async.cg.shared.global [$0], [$1], 16, $2;"]',
      'asm = ["cp.async.cg.shared.global [$0], [$1], 8, $2;"]', "cp.async copies 8 of each 16-byte chunk"),
    M("acc-fragment-row", "backend/fragments.py", "r = b.add(base, mb * WGMMA_M + 8 * ((i >> 1) & 1))",
      "r = b.add(base, mb * WGMMA_M + 8 * (i & 1))", "wgmma accumulator slots 1, 2 swap rows g + 8 and g"),
    M("wgmma-a-warpgroup-rows", "backend/rules_wgmma.py", 'f"mul i32 {wg}, {rows_per_wg * sw_a}"',
      'f"mul i32 {wg}, {rows_per_wg * sw_a // 2}"', "the second consumer warpgroup reads A half a block too high"),
    M("causal-mask-diagonal", "backend/rules_registers.py", 'f"icmp sgt i32 {t}, {dr - dc}"',
      'f"icmp sge i32 {t}, {dr - dc}"',
      "the causal mask also hides the diagonal (a query's own key)"),
    M("row-reduce-max-min", "backend/rules_registers.py",
      'fop = {"max": "max", "min": "min", "sum": "add", "mean": "add"}[kind]',
      'fop = {"max": "min", "min": "max", "sum": "add", "mean": "add"}[kind]', "row_max computes the row minimum"),
    # --- sm80-producers --------------------------------------------------------------------------------------
    M("full-count-one-copy", "passes/pipeline.py", '{"count": copiers * copies if cp_async else 1}',
      '{"count": copiers if cp_async else 1}',
      "`full` counts the producer threads once per stage, not once per copy (deadlock)", tests=T_SM80_PRODUCERS,
      topic="sm80-producers"),
    M("defer-on-sm80", "passes/pipeline.py", "defer = ring.stages >= 2 and not ring.cp_async",
      "defer = ring.stages >= 2", "the consumers' release deferred (and async groups) as for wgmma",
      tests=T_SM80_PRODUCERS, topic="sm80-producers"),
    M("expect-on-sm80", "passes/pipeline.py", "    if not ring.cp_async:  # cp.async copies arrive themselves",
      "    if True:  # cp.async copies arrive themselves", "a `pipe.expect` (TMA bytes) in the cp.async producer",
      tests=T_SM80_PRODUCERS, topic="sm80-producers"),
    M("empty-count-warpgroups-sm80", "passes/pipeline.py", "consumer_warps = n_consumers if cp_async else",
      "consumer_warps = 4 * n_consumers if cp_async else", '`empty` counts 4 per consumer "warpgroup"',
      tests=T_SM80_PRODUCERS, topic="sm80-producers"),
    M("sched-floor", "passes/plan_occupancy.py", "per_scheduler = -(-(warps + producer_warps) // SCHEDULERS_PER_SM)",
      "per_scheduler = (warps + producer_warps) // SCHEDULERS_PER_SM",
      "registers from floor(warps / 4) per scheduler (9 warps would get 248)", tests=T_SM80_PRODUCERS,
      topic="sm80-producers"),
    M("auto-any-loop", "passes/plan_occupancy.py", "if not _only_copies_and_mma(loop) or (requested or 1) > 1:",
      "if (requested or 1) > 1:", "producer warps for loops that do more than copy and multiply (attention)",
      tests=T_SM80_PRODUCERS, topic="sm80-producers"),
    M("consumer-budget-full", "passes/plan_occupancy.py",
      "needed = round_up(budget.total - budget.addr_regs + POINTER_REGS, REG_ALLOC_UNIT)",
      "needed = round_up(budget.total, REG_ALLOC_UNIT)",
      "the consumers' need counted with the copy addresses (184 > 168: no producers)", tests=T_SM80_PRODUCERS,
      topic="sm80-producers"),
    M("no-wait-all", "backend/idioms.py", 'w.asm("void", ["cp.async.wait_all;"], [], [])', "pass",
      "producers exit with copies in flight", tests=T_SM80_PRODUCERS, topic="sm80-producers"),
    M("try-wait-sm80", "backend/idioms.py", 'test = "try_wait" if target == "sm_90a" else "test_wait"',
      'test = "try_wait"', "`mbarrier.try_wait` (sm_90) on sm_80", tests=T_SM80_PRODUCERS, topic="sm80-producers"),
    M("no-noinc-arrive", "backend/rules_sm80.py",
      "    cp_async_mbarrier_arrive(cx.w, cx.target, bar)",
      "    pass", "no arrival when the copies land (`full` never completes)", tests=T_SM80_PRODUCERS,
      topic="sm80-producers"),
    M("requires-no-producer-copies", "tkir/requires.py", 'if op.name == "pipe.copy" and op.attrs.get("cp_async")',
      'if False and op.name == "pipe.copy"', "the launch checks miss the producers' cp.async sources",
      tests=T_SM80_PRODUCERS, topic="sm80-producers"),
    M("role-warp-offset", "backend/rules_pipe.py", 'ctx.tid = w.op(f"sub i32 {cx.tid}, {first_warp * WARP}", "rtid")',
      'ctx.tid = w.op(f"sub i32 {cx.tid}, {first_warp * 4 * WARP if by_warps else first_warp * WARP}", "rtid")',
      "the consumers' thread index starts 4 warps too far", tests=T_SM80_PRODUCERS, topic="sm80-producers"),
    M("persistent-sm80", "passes/persistent.py",
      'if any(isinstance(r.attrs.get("warps"), int) for r in roles) and not kernel.attrs.get(REQUEST_ATTR):',
      "if False:", "persistent rewrites sm_80 roles", tests=T_SM80_PRODUCERS, topic="sm80-producers"),
    M("store-block-tid", "backend/rules_sm80.py", "slot_coords(lay, t.shape, LLVMBuilder(w), cx.thread_index())",
      "slot_coords(lay, t.shape, LLVMBuilder(w), cx.tid)",
      "the accumulator store addresses by the block's thread index, not the role's", tests=T_SM80_PRODUCERS,
      topic="sm80-producers"),
    M("ptx70-parity", "backend/ptx.py", '    elif target == "sm_80" and PARITY_WAIT in ir:', "    elif False:",
      "PTX 7.0 with the parity wait (ptxas refuses it)", tests=T_SM80_PRODUCERS, topic="sm80-producers"),
    # --- hoist-loads -----------------------------------------------------------------------------------------
    M("hoist-ignores-request", "passes/hoist_loads.py",
      "if not (self.all or kernel.attrs.get(REQUEST_ATTR) or decided):", "if not (self.all or decided):",
      "hoist-loads ignores `@hoist_loads(1)`", tests=T_HOIST_FILECHECK, topic="hoist-loads"),
    M("hoist-ignores-size", "passes/hoist_loads.py",
      "decided = self.latency and REQUEST_ATTR not in kernel.attrs and latency_bound_rows(kernel) is not None",
      "decided = False", "hoist-loads never decides from the problem size", tests=T_SIZE_RULES, topic="hoist-loads"),
    M("hoist-overrides-no", "passes/hoist_loads.py", "decided = self.latency and REQUEST_ATTR not in kernel.attrs and",
      "decided = self.latency and", "hoist-loads decides where the source said @hoist_loads(0)", tests=T_SIZE_RULES,
      topic="hoist-loads"),
    M("fence-ignores-size", "passes/fence_loads.py",
      "decided = self.latency and REQUEST_ATTR not in kernel.attrs and _narrow_latency_bound(kernel)",
      "decided = False", "fence-loads never decides from the problem size", tests=T_SIZE_RULES, topic="fence-loads"),
    M("fence-size-any-width", "passes/fence_loads.py", "return bool(widths) and max(widths) <= NARROW_ROW",
      "return bool(widths)", "fence-loads' size rule fences wide rows too", tests=T_SIZE_RULES, topic="fence-loads"),
    M("auto-few-blocks-ignored", "tkir/tools/auto_consts.py", "if memory_bound and scored[budget][1].blocks < NUM_SMS:",
      "if False:", "auto consts keep a 4-row tile for a grid of one block", tests=T_AUTO_FEW_BLOCKS,
      topic="infer-layouts"),
    M("scratch-pad-fixed", "tkir/layout.py", "        if best is None or degree < best[0]:",
      "        if best is None or pad == 16:", "the column reduction's scratch pad fixed at 16 bytes again",
      tests=T_COLUMN_SCRATCH, topic="infer-layouts"),
    M("row-warps-fixed", "passes/infer_layouts.py", "while groups < min(need, MAX_ROW_WARPGROUPS):",
      "while False:", "a row kernel without a thread-shape annotation always gets one warpgroup",
      tests=T_ROW_WARPS, topic="infer-layouts"),
    M("row-warps-no-doubling", "passes/infer_layouts.py", "            groups *= 2", "            pass",
      "no more warps for a row kernel under one block per SM", tests=T_ROW_WARPS, topic="infer-layouts",
      occurrence=2),
    M("row-warps-latency-off-ignored", "passes/infer_layouts.py",
      "        if self.latency and widest and self._few_blocks()", "        if widest and self._few_blocks()",
      "infer-layouts{latency=false} still doubles the row warps", tests=T_ROW_WARPS, topic="infer-layouts"),
    M("carried-warps-off-ignored", "passes/infer_layouts.py",
      "        if self.carried_warps and not self.sm80 and coarsen_match(self.kernel)[0]:",
      "        if not self.sm80 and coarsen_match(self.kernel)[0]:",
      "infer-layouts{carried_warps=false} still sizes a coarsened row kernel's warps for its carried sums",
      tests=T_CARRIED_WARPS, topic="infer-layouts"),
    M("carried-warps-any-reduce-add", "passes/analysis.py", "        elif not all(v in outside for v in idx):",
      "        elif False:", "a sum indexed by the block counts as carried (coarsen-rows and infer-layouts)",
      tests=T_CARRIED_WARPS, topic="infer-layouts"),
    M("chunk-warps-off-ignored", "passes/infer_layouts.py", "        if not self.chunk_warps:",
      "        if False:", "infer-layouts{chunk_warps=false} still gives a chunk loop 2 warps", tests=T_CHUNK_WARPS,
      topic="infer-layouts"),
    M("chunk-warps-outside-loop", "passes/infer_layouts.py",
      "if not reduces or not all(in_loop(op, self.kernel) for op in reduces):", "if not reduces:",
      "a row reduction outside the loop still takes the chunk loop's warps", tests=T_CHUNK_WARPS,
      topic="infer-layouts"),
    M("red-vec-wrong-index", "backend/rules_memory.py",
      "        idx, ok = _element_index(cx, g, coords, val.type, slots[first])",
      "        idx, ok = _element_index(cx, g, coords, val.type, slots[first + 1])",
      "red.global.add.v4.f32 at the second element's address", tests=T_RED_VEC, topic="vector-red"),
    M("red-vec-ablation-ignored", "passes/vector_red.py", "        if not self.enabled or options.target",
      "        if options.target", "vector-red{enabled=false} still vectorizes", tests=T_RED_VEC, topic="vector-red"),
    M("hoist-past-store", "passes/hoist_loads.py", "if any(global_store(inner) for inner in op.walk()):", "if False:",
      "hoist-loads hoists past a store", tests=T_HOIST_FILECHECK, topic="hoist-loads"),
    M("hoist-sees-top-level-stores-only", "passes/hoist_loads.py",
      "if any(global_store(inner) for inner in op.walk()):", "if global_store(op):",
      "hoist-loads sees only top-level stores", tests=T_HOIST_FILECHECK, topic="hoist-loads"),
    M("hoist-ignores-operands", "passes/hoist_loads.py",
      "if _global_load(op) and not any(id(v) in defined_after for v in op.operands):", "if _global_load(op):",
      "hoist-loads ignores where a load's operands are defined", tests=T_HOIST_FILECHECK, topic="hoist-loads"),
    M("hoist-reverses-order", "passes/hoist_loads.py", "            anchor = op", "            pass",
      "hoist-loads reverses the loads' order", tests=T_HOIST_FILECHECK, topic="hoist-loads"),
    M("idle-split-off", "passes/infer_layouts.py", "split_idle_warps: bool = param(True,",
      "split_idle_warps: bool = param(False,", "infer-layouts' split_idle_warps off by default",
      tests=T_HOIST_FILECHECK, topic="hoist-loads"),
    M("idle-no-narrower", "passes/infer_layouts.py", "for v in _narrower(vec):", "for v in []:",
      "the idle-warp split tries no narrower chunks", tests=T_HOIST_FILECHECK, topic="hoist-loads"),
    M("class-chunk-first-value", "passes/infer_layouts.py", "if id(v) in touches:", "if True:",
      "a class's chunk width from its first value", tests=T_CHUNK_SASS, topic="hoist-loads"),
    M("class-chunk-narrowest-only", "passes/infer_layouts.py", "if id(v) in touches:", "if False:",
      "a class's chunk width from the narrowest tile only", tests=T_CHUNK_SASS, topic="hoist-loads"),
    M("model-shares-with-absent-blocks", "tkir/tools/tune_model.py",
      "per_sm = max(1, min(blocks_per_sm, math.ceil(blocks / NUM_SMS)))", "per_sm = max(1, blocks_per_sm)",
      "the tune model lets a lone block share its SM with blocks that do not exist", tests=T_TUNE_LONE,
      topic="hoist-loads"),
    M("model-no-floor", "tkir/tools/tune_model.py", "ms = max(waves * per_block, KERNEL_FLOOR_S) * 1e3",
      "ms = waves * per_block * 1e3", "the tune model has no kernel time floor", tests=T_TUNE_LONE,
      topic="hoist-loads"),
    M("lead-fallback-none", "tkir/tools/timing.py", "for _ in range(FALLBACK_LEAD_FLUSHES):", "for _ in range(0):",
      "no host lead without torch.cuda._sleep", tests=T_BENCH_LEAD, topic="hoist-loads"),
    M("annotation-drops-request", "frontend/annotations.py", '_switch("H", HOIST_LOADS_ATTR, record_off=True)',
      '_switch("H", "ignored", record_off=True)',
      "`@hoist_loads` records no request", tests=T_HOIST_FILECHECK, topic="hoist-loads"),
    M("annotation-accepts-2", "frontend/annotations.py", "if c not in (0, 1) or isinstance(c, float):",
      "if c not in (0, 1, 2) or isinstance(c, float):", "`@hoist_loads(2)` accepted", tests=T_HOIST_DIAGNOSTICS,
      topic="hoist-loads"),
    M("rmsnorm-sum-not-squares", "tests/data/rows/rmsnorm.tk", "sq += xcf * xcf", "sq += xcf",
      "rmsnorm's chunk loop sums x, not x²", tests=T_RMSNORM_CHUNKS, topic="hoist-loads"),
    # --- edge-tests ------------------------------------------------------------------------------------------
    M("loop-last-is-hi", "tkir/bounds.py", "return lo + (hi - 1 - lo) // step * step", "return hi - 1",
      "a loop's last index taken as hi - 1 whatever the step", tests=T_BOUNDS, topic="edge-tests"),
    M("loop-ignores-step", "tkir/bounds.py", "if lo is None or hi is None or step is None or lo < 0 or step <= 0:",
      "if lo is None or hi is None or lo < 0:", "a loop's step not checked to be a positive constant",
      tests=T_BOUNDS, topic="edge-tests"),
    M("fits-strict", "tkir/bounds.py", "if top is None or extent * (top + 1) > dim:",
      "if top is None or extent * top > dim:", "`E * top <= D` instead of `E * (top + 1) <= D`", tests=T_BOUNDS,
      topic="edge-tests"),
    M("grid-any-size", "tkir/bounds.py", "if d < len(grid) and _same_size(str(grid[d]), dim):", "if d < len(grid):",
      "any grid dimension taken as the size", tests=T_BOUNDS, topic="edge-tests"),
    M("one-row-any-extent", "tkir/bounds.py",
      'if extent != 1 or not isinstance(coord.owner, Operation) or coord.owner.name != "tk.block_id":',
      'if not isinstance(coord.owner, Operation) or coord.owner.name != "tk.block_id":',
      "a one-row proof for tiles of several rows", tests=T_BOUNDS, topic="edge-tests"),
    M("sub-is-add", "tkir/bounds.py", 'if owner.name in ("arith.add", "arith.mul"):',
      'if owner.name in ("arith.add", "arith.mul", "arith.sub"):', "subtraction treated as addition in the bound",
      tests=T_BOUNDS, topic="edge-tests"),
    M("rows-never-tested", "backend/rules_registers.py", "rows_in, cols_in = proven if is_tile else (False, proven[0])",
      "rows_in, cols_in = (True, proven[-1]) if is_tile else (False, proven[0])", "a tile's rows never edge-tested",
      tests=T_EDGE_FILECHECK, topic="edge-tests"),
    M("extents-swapped", "tkir/bounds.py",
      "extents = (tile.rows, tile.cols) if isinstance(tile, TileType) else (tile.n,)",
      "extents = (tile.cols, tile.rows) if isinstance(tile, TileType) else (tile.n,)",
      "a tile's rows and columns swapped in the proof", tests=T_EDGE_FILECHECK, topic="edge-tests"),
    M("no-8-byte-access", "tkir/layout.py", "VECTOR_ACCESS_BYTES = (4, 8, 16)", "VECTOR_ACCESS_BYTES = (4, 16)",
      "no 8-byte vector accesses", tests=T_VECTOR_RUNTIME, topic="edge-tests"),
    M("aligned-16-always", "tkir/requires.py", "widest[g.name] = max(widest.get(g.name, 0), nbytes)",
      "widest[g.name] = 16", "the launch asks 16-byte alignment for every piece", tests=T_VECTOR_RUNTIME,
      topic="edge-tests"),
    M("bf16-shift-15", "backend/f32.py", "shl i32 {bits}, 16", "shl i32 {bits}, 15",
      "bf16 -> f32 shifted by 15", tests=T_BASED_SHIFT, topic="edge-tests"),
    M("layernorm-no-shift", "tests/data/rows/layernorm.tk", "let dx = f32(xc) - f32(k0)", "let dx = f32(xc)",
      "layernorm's chunk loop without the shift by the first chunk", tests=T_WIDE_ROWS, topic="edge-tests"),
    M("layernorm-skips-first-chunk", "tests/data/rows/layernorm.tk", "let mi = f32(k0) + s1 * inv_n",
      "let mi = s1 * inv_n", "layernorm's merge without the first chunk", tests=T_WIDE_ROWS, topic="edge-tests"),
    # --- cache-policy ----------------------------------------------------------------------------------------
    M("marks-shared-loads-too", "passes/analysis.py",
      "return (isinstance(op.operands[0].type, GlobalType) and isinstance(t, TileType | VectorType)",
      "return (isinstance(t, TileType | VectorType)", "cache-policy marks shared -> register loads too",
      tests=T_CACHE_FILECHECK, topic="cache-policy"),
    M("marks-stores", "passes/analysis.py", '    if op.name != "tk.load" or not op.results or not op.operands:',
      '    if op.name not in ("tk.load", "tk.store") or not op.operands:', "cache-policy marks stores",
      tests=T_CACHE_FILECHECK, topic="cache-policy"),
    M("none-marks-anyway", "passes/cache_policy.py", '        if self.loads == "none":', "        if False:",
      "`cache-policy{loads=none}` marks anyway", tests=T_CACHE_FILECHECK, topic="cache-policy"),
    M("backend-ignores-hint", "backend/cache_policy.py", "    return None if p is None else cx.l2_policies[str(p)]",
      "    return None", "the backend ignores the `l2` mark", tests=T_CACHE_BACKEND, topic="cache-policy"),
    M("policy-evict-first", "backend/cache_policy.py", '[f"createpolicy.fractional.L2::{p}.b64 $0, 1.0;"]',
      '["createpolicy.fractional.L2::evict_first.b64 $0, 1.0;"]', "every L2 policy made evict_first",
      tests=T_CACHE_BACKEND, topic="cache-policy"),
    M("8-bytes-as-words", "backend/cache_policy.py", "    if nbytes == 8 and elem_bytes == 2:",
      "    if nbytes == 8 and elem_bytes == 3:", "8 bytes of bf16 loaded as words", tests=T_CACHE_BACKEND,
      topic="cache-policy"),
    M("sm80-old-ptx", "backend/ptx.py", '    elif target == "sm_80" and CACHE_HINT in ir:', "    elif False:",
      "the sm_80 PTX version not raised for cache hints", tests=T_CACHE_BACKEND, topic="cache-policy"),
    M("move-always", "passes/contract_fma.py", "        if _move_is_free(mul, top[id(add)], readers, top):",
      "        if True:", "contract-fma always moves the multiply", tests=T_CONTRACT_FMA, topic="cache-policy"),
    M("move-never", "passes/contract_fma.py", "        if _move_is_free(mul, top[id(add)], readers, top):",
      "        if False:", "contract-fma never moves the multiply", tests=T_CONTRACT_FMA, topic="cache-policy"),
    M("move-ignores-later-reads", "passes/contract_fma.py",
      "top[id(r)] >= at for r in readers.get(id(v), []) if r is not mul",
      "top[id(r)] > at for r in readers.get(id(v), []) if r is not mul",
      "contract-fma counts a read at the add as not later", tests=T_CONTRACT_FMA, topic="cache-policy"),
    M("no-occ-8", "tests/data/rows/layernorm.tk", "OCC=[0, 3, 4, 8],", "OCC=[0, 3, 4],",
      "no OCC = 8 in layernorm's tune space", tests=T_TUNE_OCC, topic="cache-policy"),
    # --- sm80-copy -------------------------------------------------------------------------------------------
    M("ignore-src-inverted", "backend/rules_sm80.py", 'f"setp.eq.b32 {IGNORE_SRC}, $2, 0;",',
      'f"setp.ne.b32 {IGNORE_SRC}, $2, 0;",', "cp.async `ignore_src` set where the chunk is inside (inverted)",
      tests=T_SM80_COPY, topic="sm80-copy"),
    M("row-pitch-in-elements", "backend/rules_sm80.py", "{ncols64}, {dr * eb}", "{ncols64}, {dr}",
      "round k's address k row pitches in elements, not bytes", tests=T_SM80_COPY, topic="sm80-copy"),
    M("ignores-row-test", "backend/rules_sm80.py", "w.op(f'and i1 {rok}, {cok}', 'ok')",
      "w.op(f'and i1 1, {cok}', 'ok')", "the cp.async row's edge test dropped", tests=T_SM80_COPY, topic="sm80-copy"),
    M("sm80-ptx-7.4-with-ignore-src", "backend/ptx.py", "        features = PTX_FEATURES_IGNORE_SRC",
      "        features = PTX_FEATURES_CACHE_HINT", "sm_80 PTX 7.4 with ignore-src in it (ptxas refuses it)",
      tests=T_SM80_COPY, topic="sm80-copy"),
    M("yield-per-copy", "backend/rules_sm80.py",
      '              ["r", "l", "r", "r"], [("i32", saddr), ("ptr addrspace(1)", g), ("i32", ok), ("i32", on)])',
      '              ["r", "l", "r", "r"], [("i32", saddr), ("ptr addrspace(1)", g), ("i32", ok), ("i32", on)]); yield',
      "one cp.async per mma unit again (the copies of a tile not one run)", tests=T_CP_ASYNC_RUNS, topic="sm80-copy"),
    M("producers-kept-on-ties", "passes/plan_occupancy.py", "if _mma_warps_per_sm(one) >= _mma_warps_per_sm(plan):",
      "if _mma_warps_per_sm(one) > _mma_warps_per_sm(plan):",
      "producer warps kept on a tie of mma warps per SM (the one-role loop wins ties)", tests=T_PRODUCER_RULE,
      topic="sm80-copy"),
    M("producers-always", "passes/plan_occupancy.py", "if _mma_warps_per_sm(one) >= _mma_warps_per_sm(plan):",
      "if False:", "producer warps always (plan-occupancy's automatic rule off)", tests=T_PRODUCER_RULE,
      topic="sm80-copy"),
    M("order-fixed", "tkir/tools/timing.py", "rotate: bool = True", "rotate: bool = False",
      "`time_pair_ms` in a fixed order",
      tests=T_BENCH, topic="sm80-copy"),
    M("reps-not-rounded", "tkir/tools/timing.py", "        reps = -(-reps // count) * count", "        pass",
      "reps not rounded up to a multiple of the kernels", tests=T_BENCH, topic="sm80-copy"),
    M("fence-after-store", "passes/fence_loads.py", "            return False  # a store before the reduction",
      "            continue  # a store before the reduction", "fence-loads fences after a store",
      tests=T_FENCE_FILECHECK, topic="sm80-copy"),
    M("fence-across-loops", "passes/fence_loads.py", "        if last_load is not None and not _register_compute(op):",
      "        if False:", "fence-loads fences across a loop", tests=T_FENCE_LOADS, topic="sm80-copy"),
    # --- fence-loads -----------------------------------------------------------------------------------------
    M("opt-in-ignored", "passes/fence_loads.py",
      "            if self.opt_in and not (kernel.attrs.get(REQUEST_ATTR) or decided):",
      "            if False:", "fence-loads' opt-in ignored", tests=T_FENCE_LOADS, topic="fence-loads"),
    M("annotation-records-nothing", "frontend/annotations.py", '_switch("F", FENCE_LOADS_ATTR, record_off=True)',
      '_switch("F", "ignored", record_off=True)', "`@fence_loads` records nothing", tests=T_FENCE_LOADS,
      topic="fence-loads"),
    M("fence-space-for-wide-rows", "tests/data/rows/layernorm.tk", "FENCE=[0, 1], where=FENCE * D <= 1024,",
      "FENCE=[0, 1], where=FENCE * D <= 16384,", "layernorm's FENCE offered for wide rows", tests=T_FENCE_LOADS,
      topic="fence-loads"),
    M("same-never", "tkir/tools/tune.py", "            if c.code in first:", "            if False:",
      "the tuner's `same` stage never drops a duplicate", tests=T_TUNE_ROUNDS, topic="fence-loads"),
    M("same-ignores-launch", "tkir/tools/tune.py", 'code = hashlib.sha256((k.asm["ptx"] + "\\0" + launch).encode())',
      'code = hashlib.sha256((k.asm["ptx"]).encode())', "the `same` stage keyed on the PTX alone, not the launch",
      tests=T_TUNE_SAME, topic="fence-loads"),
    M("refine-never", "tkir/tools/tune.py", "    near = refine_candidates(good) if refine else []", "    near = []",
      "the near-best points never timed again", tests=T_TUNE_ROUNDS, topic="fence-loads"),
    M("refine-decides-not", "tkir/tools/tune.py", "        return min(again, key=lambda c: c.again_ms)",
      "        return min(timed, key=lambda c: c.ms)", "the first round decides although the points were timed again",
      tests=T_TUNE_ROUNDS, topic="fence-loads"),
    M("refine-everything", "tkir/tools/tune.py", "c.ms <= REFINE_WITHIN * best), key=lambda c: c.ms)[:REFINE_TOP]",
      "True), key=lambda c: c.ms)", "every point timed again", tests=T_TUNE_ROUNDS, topic="fence-loads"),
    M("reread-space-everywhere", "tests/data/rows/layernorm.tk",
      "REREAD=[0, 1], where=REREAD * DC < REREAD * D + 1 - REREAD)",
      "REREAD=[0, 1])", "layernorm's REREAD offered where one read holds the row", tests=T_REREAD,
      topic="fence-loads"),
    M("reread-uncentred", "tests/data/rows/layernorm.tk", "            rstd = rsqrt(row_sum(xc * xc) / D + EPS)",
      "            rstd = rsqrt(row_sum(xf * xf) / D + EPS)", "layernorm's re-read variance from uncentred squares",
      tests=T_REREAD, topic="fence-loads"),
    M("rms-reread-no-square", "tests/data/rows/rmsnorm.tk",
      "            rstd = rsqrt(row_sum(f32(x) * f32(x)) / D + EPS)",
      "            rstd = rsqrt(row_sum(f32(x)) / D + EPS)", "rmsnorm's re-read sum without the squares",
      tests=T_REREAD, topic="fence-loads"),
    M("reps-rounded-always", "tkir/tools/timing.py", "    if rotate and count <= ROTATE_FULL_MAX:", "    if rotate:",
      "the reps rounded up for every group of kernels", tests=T_BENCH, topic="fence-loads"),
    M("reps-rounded-never", "tkir/tools/timing.py", "    if rotate and count <= ROTATE_FULL_MAX:", "    if False:",
      "the reps never rounded up", tests=T_BENCH, topic="fence-loads"),
    # --- readonly-loads --------------------------------------------------------------------------------------
    M("readonly-never", "passes/readonly_loads.py", "            for a in readonly:", "            for a in []:",
      "readonly-loads marks nothing", tests=T_READONLY_FILECHECK, topic="readonly-loads"),
    M("readonly-despite-stores", "passes/readonly_loads.py",
      "        and all(_reads_only(op, a) for op in uses[id(a)])]",
      "        and any(_reads_only(op, a) for op in uses[id(a)])]", "a tensor read and written marked read-only",
      tests=T_READONLY_FILECHECK, topic="readonly-loads"),
    M("readonly-any-first-operand", "passes/readonly_loads.py",
      '    return register_load_from_global(op) and op.operands[0] is param \\',
      '    return op.operands[0] is param \\', "any use with the tensor first counted as a read",
      tests=T_READONLY_FILECHECK, topic="readonly-loads"),
    M("reread-never", "passes/readonly_loads.py", "                    if _rereads(op, uses[id(a)]):",
      "                    if False:", "no `reread` marks", tests=T_READONLY_FILECHECK, topic="readonly-loads"),
    M("reread-everywhere", "passes/readonly_loads.py",
      "    if loop is None or not any(global_store(inner) for inner in loop.walk()):", "    if False:",
      "`reread` on every load of the tensor", tests=T_READONLY_SASS, topic="readonly-loads"),
    M("nc-not-emitted", "backend/cache_policy.py", '    opcode = ("ld.global" + (".nc" if nc else "")',
      '    opcode = ("ld.global" + ("" if nc else "")', "`.nc` not emitted", tests=T_READONLY_FILECHECK,
      topic="readonly-loads"),
    M("launch-lists-nothing", "backend/launch.py",
      '        readonly=tuple(str(n) for n in kernel.attrs.get("readonly_params", [])),', "        readonly=(),",
      "the launch description lists no read-only tensor", tests=T_READONLY_FILECHECK, topic="readonly-loads"),
    M("overlap-unchecked", "backend/runtime.py",
      "    _check_readonly_overlap(kernel, launch.readonly, arrays)", "    pass",
      "the runtime's read-only overlap check left out", tests=T_READONLY_RUNTIME, topic="readonly-loads"),
    M("overlap-touching", "backend/runtime.py", "            if a.ptr < b.ptr + b.nbytes and b.ptr < a.ptr + a.nbytes:",
      "            if a.ptr <= b.ptr + b.nbytes and b.ptr <= a.ptr + a.nbytes:",
      "adjacent tensors counted as overlapping", tests=T_READONLY_RUNTIME, topic="readonly-loads"),
    M("c-overlap-unchecked", "backend/emit_c.py", "        out += self.overlap_checks()", "        pass",
      "the C launcher's overlap check left out", tests=T_READONLY_C, topic="readonly-loads"),
    M("tune-first-round-decides", "tkir/tools/tune.py", "        return min(again, key=lambda c: c.again_ms)",
      "        return min(again, key=lambda c: c.ms)", "the tuner picks by the first round", tests=T_TUNE_SECOND_ROUND,
      topic="readonly-loads"),
    M("var-is-mean", "tkir/interp/ops.py", '"var": lambda a, axis: np.var(', '"var": lambda a, axis: np.mean(',
      "the interpreter's row_var is the mean", tests=T_ROW_STATS, topic="readonly-loads"),
    M("var-on-columns", "tkir/ops.py", '    expect(kind not in ROW_ONLY_KINDS or axis == "row", ', "    expect(True, ",
      "row_var accepted on columns", tests=T_ROW_STATS, topic="readonly-loads"),
    M("fuse-never", "passes/fuse_row_stats.py", "        mean.attrs[STATS_ATTR] = var.attrs[STATS_ATTR] = group",
      "        continue", "fuse-row-stats marks nothing", tests=T_FUSE_FILECHECK, topic="readonly-loads"),
    M("fuse-any-operand", "passes/fuse_row_stats.py",
      '        mean = next((o for o in ops if _row(o, "mean") and o.operands[0] is var.operands[0]), None)',
      '        mean = next((o for o in ops if _row(o, "mean")), None)', "a row_var paired with another tile's row_mean",
      tests=T_FUSE_FILECHECK, topic="readonly-loads"),
    # --- cluster ---------------------------------------------------------------------------------------------
    M("never-clustered", "passes/cluster_rows.py", "            kernel.attrs[CLUSTER_ATTR] = c", "            pass",
      "cluster-rows sets nothing", tests=T_CLUSTER_FILECHECK, topic="cluster"),
    M("sm80-clustered", "passes/cluster_rows.py", '            if options.target != "sm_90a":', "            if False:",
      "sm_80 kernels clustered too", tests=T_CLUSTER_ROWS, topic="cluster"),
    M("column-reduction-allowed", "passes/cluster_rows.py", 'str(op.attrs.get("axis")) == "col"',
      'str(op.attrs.get("axis")) == "cols"', "a column reduction accepted by cluster-rows", tests=T_CLUSTER_ROWS,
      topic="cluster"),
    M("shared-allowed", "passes/cluster_rows.py", '_REFUSED = {"tk.alloc": "a shared allocation",',
      '_REFUSED = {"tk.alloc_": "",', "a shared allocation accepted by cluster-rows", tests=T_CLUSTER_ROWS,
      topic="cluster"),
    M("uneven-warps-allowed", "passes/cluster_rows.py", "    if warps % c:", "    if False:",
      "warps that do not split evenly over the cluster accepted", tests=T_CLUSTER_ROWS, topic="cluster"),
    M("plan-per-block", "passes/plan_occupancy.py", "        threads //= cluster", "        pass",
      "the occupancy plan counts the block's threads, not a CTA's", tests=T_CLUSTER_ROWS, topic="cluster"),
    M("block-id-from-ctaid", "backend/rules_core.py", '    sreg = "clusterid." if cx.cluster > 1 else "ctaid."',
      '    sreg = "ctaid."', "block.x from %ctaid in a cluster", tests=T_CLUSTER_FILECHECK, topic="cluster"),
    M("no-cluster-dim", "backend/lower_llvm.py", "nvvm.cluster_dim", "nvvm.cluster_dim_off", "no .reqnctapercluster",
      tests=T_CLUSTER_FILECHECK, topic="cluster"),
    M("exchange-local", "backend/exchange.py",
      "    return cx.cluster > 1 and (cx.cta_threads // WARP_THREADS) % parts != 0", "    return False",
      "no row exchange across CTAs", tests=T_CLUSTER_FILECHECK, topic="cluster"),
    M("exchange-always", "backend/exchange.py",
      "    return cx.cluster > 1 and (cx.cta_threads // WARP_THREADS) % parts != 0", "    return cx.cluster > 1",
      "an exchange across CTAs for rows within one CTA", tests=T_CLUSTER_FILECHECK, topic="cluster"),
    M("exchange-own-cta-only", "backend/exchange.py", "    for r in range(cx.cluster):", "    for r in range(1):",
      "partials written to the own CTA only", tests=T_CLUSTER_FILECHECK, topic="cluster"),
    M("exchange-cta-barrier", "backend/exchange.py", "    cluster_barrier(cx.w) if across else cx.sync()",
      "    cx.sync()",
      "CTA barriers instead of cluster barriers around the exchange", tests=T_CLUSTER_FILECHECK, topic="cluster"),
    M("scratch-unguarded", "backend/context.py", "        if self.cluster > 1 and not cluster_wide:",
      "        if False:", "the backend's cluster scratch guard left out", tests=T_CLUSTER_ROWS, topic="cluster"),
    M("grid-in-blocks", "backend/launch.py", '        grid[0] = f"{cluster} * ({grid[0]})"', "        pass",
      "the launch grid in blocks, not CTAs", tests=T_CLUSTER_ROWS, topic="cluster"),
    M("launch-without-cluster", "backend/launch.py",
      "        cluster=(cluster, 1, 1) if clustered else _multicast_cluster(kernel),",
      "        cluster=_multicast_cluster(kernel),",
      'no "cluster" in the launch description', tests=T_CLUSTER_ROWS, topic="cluster"),
    M("multicast-release-local", "backend/rules_pipe.py", "        mbarrier_arrive_cluster(cx.w, bar, ctas)",
      "        mbarrier_arrive(cx.w, cx.target, bar)",
      "a multicast ring's release arrives only on this CTA's barrier (the partner's producer never sees it)",
      tests=T_MULTICAST, topic="cluster"),
    M("multicast-no-drain", "passes/multicast.py", "    _drain(roles[\"producer\"], ploop, empties)", "    pass",
      "the producer exits without draining its ring (the partner may still arrive on its barriers)",
      tests=T_MULTICAST, topic="cluster"),
    M("model-ignores-cluster", "tkir/tools/tune_model.py", "    blocks = max(1, cluster)", "    blocks = 1",
      "the tune model ignores the cluster", tests=T_CLUSTER_ROWS, topic="cluster"),
    M("size-3-accepted", "frontend/annotations.py", "CLUSTER_SIZES = (1, 2, 4, 8)", "CLUSTER_SIZES = (1, 2, 3, 4, 8)",
      "`@cluster(3)` accepted", tests=T_CLUSTER_ROWS, topic="cluster"),
    # --- pipeline-protocol: an audit's single edits of gemm's mbarrier pipeline, made by the pass that writes
    # them (the verifier's protocol model, tkir/verify_pipeline.py, rejects the IR after that pass), and the
    # skipped release of stage 0 in the backend (the release rounds of tests/backend/test_mutation_kills.py)
    M("copy-bytes-half", "passes/pipeline.py",
      'return {**ld.attrs, "cp_async": True} if ring.cp_async else dict(ld.attrs)',
      'return {**ld.attrs, "cp_async": True} if ring.cp_async else {**ld.attrs, "bytes": ld.attrs["bytes"] // 2}',
      "a TMA copy completes half its tile's bytes on `full`", tests=T_PIPELINE_PROTOCOL, topic="pipeline-protocol"),
    M("expect-first-load-only", "passes/pipeline.py", '{"bytes": _bytes(loads)})', '{"bytes": _bytes(loads[:1])})',
      "`pipe.expect` announces the first copy's bytes only (the phase completes before B lands)",
      tests=T_PIPELINE_PROTOCOL, topic="pipeline-protocol"),
    M("empty-count-half", "passes/pipeline.py", '{"count": consumer_warps}, bars_t)',
      '{"count": consumer_warps // 2}, bars_t)', "`empty` completes after half the consumer warps arrived",
      tests=T_PIPELINE_PROTOCOL, topic="pipeline-protocol"),
    M("phase-modulus-stages", "passes/pipeline.py", '[rnd, ring.two], "phase")', '[rnd, ring.nstages], "phase")',
      "the phase parity is the round mod S, not mod 2 (parity 2 from round 2 of a 4-stage ring)",
      tests=T_PIPELINE_PROTOCOL, topic="pipeline-protocol"),
    M("stage-modulus-two", "passes/pipeline.py", '[it, ring.nstages], "s")', '[it, ring.two], "s")',
      "the stage index is it mod 2, not mod S", tests=T_PIPELINE_PROTOCOL, topic="pipeline-protocol"),
    M("consumer-wait-dropped", "passes/pipeline.py", '    b.void("pipe.wait", [ring.full, s, phase])', "    pass",
      "the consumers read a stage without waiting for its fill", tests=T_PIPELINE_PROTOCOL,
      topic="pipeline-protocol"),
    M("producer-wait-dropped", "passes/pipeline.py", '    b.void("pipe.wait", [ring.empty, s, free])', "    pass",
      "the producer refills a stage without waiting for its release", tests=T_PIPELINE_PROTOCOL,
      topic="pipeline-protocol"),
    M("release-dropped", "passes/pipeline.py",
      '    lb.insert_after(last_use, Operation("pipe.arrive", [ring.empty, s], attrs=',
      '    0 and lb.insert_after(last_use, Operation("pipe.arrive", [ring.empty, s], attrs=',
      "the consumers never release a stage (the producer waits forever in round 2)",
      tests=T_PIPELINE_PROTOCOL, topic="pipeline-protocol"),
    M("deferred-dropped", "passes/pipeline.py", 'attrs={"deferred": True} if defer else {}))', "attrs={}))",
      "a stage is released while the wgmma group reading it is still in flight", tests=T_PIPELINE_PROTOCOL,
      topic="pipeline-protocol"),
    M("elem-strides-2", "passes/create_tma.py", '"elem_strides": [1] * g.rank,',
      '"elem_strides": [2] + [1] * (g.rank - 1),', "TMA copies every other element of a box's inner dim",
      tests=T_PIPELINE_PROTOCOL, topic="pipeline-protocol"),
    M("release-skips-stage-0", "backend/rules_pipe.py", 'f"icmp sge i32 {prev}, 0"', 'f"icmp sgt i32 {prev}, 0"',
      "the deferred release skips stage 0 (every GEMM with more k-iterations than stages hangs)",
      tests=T_PIPELINE_PROTOCOL, topic="pipeline-protocol"),
    # --- audit3: 25 mutations chosen by a third audit, in the code the round's robustness work touches --------
    # wgmma descriptors (PTX ISA §9.7.15.5.1.2.2: start address bits 13-0 hold addr >> 4, 14 bits)
    M("desc-addr-13-bits", "backend/rules_wgmma.py", 'f"and i64 {a_enc}, 16383"', 'f"and i64 {a_enc}, 8191"',
      "the descriptor's start address keeps 13 bits: shared addresses past 128 KB wrap", tests=T_A3_DESC,
      topic="audit3"),
    M("desc-k-major-panel-stride", "backend/wgmma_desc.py",
      "offset = (kbyte // span) * rows * span + row0 * span + kbyte % span",
      "offset = (kbyte // span) * span + row0 * span + kbyte % span",
      "a K-major k16 step past the first 32/64-byte panel lands one row, not one panel, further",
      tests=T_A3_DESC, topic="audit3"),
    M("desc-interleaved-mn-lbo-sbo", "backend/wgmma_desc.py", "return offset, CORE_ROWS * span, panel_bytes",
      "return offset, panel_bytes, CORE_ROWS * span",
      "the unswizzled (interleaved) MN-major B gets the swizzled layout's LBO/SBO roles", tests=T_A3_DESC,
      topic="audit3"),
    # mbarrier parity and releases
    M("release-after-loop-dropped", "backend/rules_pipe.py",
      '        arrive_prev(cx, self.state["prev"], self.state["bars"])', "        pass",
      "the last iteration's stage is never released after the loop (a persistent block's next tile waits)",
      tests=T_A3_PIPE, topic="audit3"),
    M("release-prev-starts-at-0", "backend/rules_pipe.py", '        return ["-1"]', '        return ["0"]',
      "the deferred release starts at stage 0: stage 0 released in iteration 0 before it is read",
      tests=T_A3_PIPE, topic="audit3"),
    M("wait-loop-inverted", "backend/idioms.py", 'again = w.op(f"icmp eq i32 {done}, 0", "again")',
      'again = w.op(f"icmp ne i32 {done}, 0", "again")',
      "the mbarrier wait loop leaves at once when the phase is not done (and spins when it is)",
      tests=T_A3_PIPE, topic="audit3"),
    M("mbarrier-slot-4-bytes", "backend/idioms.py", "MBARRIER_SHIFT = MBARRIER_BYTES.bit_length() - 1",
      "MBARRIER_SHIFT = MBARRIER_BYTES.bit_length() - 2",
      "mbarrier i of an array at 4 * i: neighbouring 8-byte barriers overlap", tests=T_A3_PIPE, topic="audit3"),
    # stage indices
    M("stage-stride-half", "backend/rules_pipe.py",
      'off = cx.w.op(f"mul i32 {cx.scalar(op.operands[1])}, {stride}", "soff")',
      'off = cx.w.op(f"mul i32 {cx.scalar(op.operands[1])}, {stride // 2}", "soff")',
      "a ring buffer's stage s starts s half-stages in: neighbouring stages overlap", tests=T_A3_PIPE,
      topic="audit3"),
    M("cp-async-wait-one-short", "passes/pipeline_cp_async.py", 'b.void("pipe.async_wait", [], {"pending": ahead - 1})',
      'b.void("pipe.async_wait", [], {"pending": ahead})',
      "the cp.async loop's wait leaves the group of the stage it reads in flight", tests=T_A3_CP_ASYNC,
      topic="audit3"),
    M("cp-load-wait-one", "backend/rules_sm80.py", "        cp_async_wait(w, 0)", "        cp_async_wait(w, 1)",
      "an unpipelined cp.async load waits for no group before its tile is read", tests=T_A3_CP_LOAD,
      topic="audit3"),
    # masks and split-masks' bounds
    M("split-select-bound-plus-1", "passes/split_masks.py", "return _Bound(aff[0], bound, le - extent, aff[1])",
      "return _Bound(aff[0], bound, le - extent + 1, aff[1])",
      "split-masks lets the last unmasked key block reach one key past N (N = -1 mod BKV)", tests=T_A3_SPLIT,
      topic="audit3"),
    M("split-causal-bound-plus-1", "passes/split_masks.py", "return _Bound(a, m.operands[1], 1 - t.cols, b)",
      "return _Bound(a, m.operands[1], 2 - t.cols, b)",
      "split-masks runs the diagonal key block unmasked when it ends one past the block's first query",
      tests=T_A3_SPLIT, topic="audit3"),
    M("causal-general-diagonal", "backend/rules_registers.py",
      """masked = w.op(f"icmp sgt i32 {cr}, {w.op(f'sub i32 0, {delta}', 'nd')}", "msk")""",
      """masked = w.op(f"icmp sge i32 {cr}, {w.op(f'sub i32 0, {delta}', 'nd')}", "msk")""",
      "mask_causal without per-slot steps also hides the diagonal", tests=T_A3_SPLIT, topic="audit3"),
    # stream-K split bounds and flags
    M("sk-last-peer-ceil", "passes/stream_k.py",
      'last = ob.op("arith.div", [ob.op("arith.sub", [span, s["c1"]]), s["total"]], "sk_last_peer")',
      'last = ob.op("arith.div", [span, s["total"]], "sk_last_peer")',
      "the owner adds one peer too many where a tile ends exactly at a block boundary", tests=T_A3_STREAMK,
      topic="audit3"),
    M("sk-kb-unclamped", "passes/stream_k.py",
      'kb = b.op("arith.max", [b.op("arith.sub", [s["begin"], tbase]), s["c0"]], "sk_kb")',
      'kb = b.op("arith.sub", [s["begin"], tbase], "sk_kb")',
      "a segment after a block's first starts at a negative K iteration", tests=T_A3_STREAMK, topic="audit3"),
    M("sk-rows-one-short", "passes/stream_k.py", '    return b.op("arith.sub", [m, start], "sk_rows")',
      '    return b.op("arith.sub", [b.op("arith.sub", [m, start]), b.const(1)], "sk_rows")',
      "a stream-K partial leaves out the tile's last row inside the output", tests=T_A3_STREAMK, topic="audit3"),
    M("sk-rows-second-pair", "backend/rules_streamk.py", "        row = coords[VEC * j][0]",
      "        row = coords[VEC * j + 2][0]",
      "a partial group is moved by its second row (8 below the first)", tests=T_A3_STREAMK, topic="audit3"),
    M("sk-flag-per-block-only", "backend/rules_streamk.py",
      """fidx = w.op(f"add i32 {w.op(f'mul i32 {slot}, {nwg}', 'fs')}, {ctx.wg}", "fidx")""",
      """fidx = w.op(f"mul i32 {slot}, {nwg}", "fidx")""",
      "both consumer warpgroups of a stream-K helper signal on one flag: the owner's second warpgroup may read "
      "partials not yet written", tests=T_A3_STREAMK, topic="audit3"),
    # persistent rounds
    M("persistent-last-group-full", "passes/persistent.py",
      'gsize = bb.op("arith.min", [left, c_group], rname="group_rows")', "gsize = c_group",
      "the last group of tile rows taken as full: its tiles land on rows past the end or are skipped",
      tests=T_A3_PERSISTENT, topic="audit3"),
    M("rotated-round-modulus-grid", "passes/persistent.py",
      '[bb.op("arith.add", [pid, rnd], rname="rotated"), n_r], rname="in_round")',
      '[bb.op("arith.add", [pid, rnd], rname="rotated"), nprog], rname="in_round")',
      "the rotated order's last, partial round wraps by the grid: tiles past the end, others never computed",
      tests=T_A3_PERSISTENT, topic="audit3"),
    M("persistent-iteration-restarts", "passes/persistent.py",
      'nxt = b.op("arith.add", [it, loop_trip_count(b, kloop, c0)], rname="iter_next")',
      'nxt = b.op("arith.add", [it, c0], rname="iter_next")',
      "the pipeline's iteration counter restarts at every tile: stages and parities out of step with the barriers",
      tests=T_A3_PERSISTENT, topic="audit3"),
    # reductions: the cross-warp combine and the Welford merges
    M("row-parts-last-only", "backend/exchange.py", "acc = v if acc is None else combine(cx, fop, acc, v)",
      "acc = v", "a row split over warps takes the last warp's partial only", tests=T_A3_ROWS, topic="audit3",
      gpu_tests=G_A3_ROWS),
    M("welford-parts-count", "backend/exchange.py", 'f"fmul float {dev}, {f32_literal(float(n))}", "pq"',
      'f"fmul float {dev}, {f32_literal(float(n * parts))}", "pq"',
      "the cross-warp Welford merge weighs the parts' mean deviations by the row, not the part",
      tests=T_A3_ROWS, topic="audit3", gpu_tests=G_A3_ROWS),
    M("welford-lanes-count", "backend/rules_registers.py", "{f32_literal(n / 2)}", "{f32_literal(n)}",
      "the butterfly Welford merge doubles the between-lanes term of M2", tests=T_A3_ROWS, topic="audit3",
      gpu_tests=G_A3_ROWS),
    # swizzle selection and the bank model's padding
    M("swizzle-order-inverted", "passes/analysis.py", "order = sorted(SWIZZLE_SPANS, reverse=wide_first)",
      "order = sorted(SWIZZLE_SPANS, reverse=not wide_first)",
      "wgmma/TMA tiles tried narrowest span first (more TMA boxes); others widest first", tests=T_A3_SWIZZLE,
      topic="audit3"),
    M("bank-pad-misaligned", "passes/bank_conflicts.py", "            if pad % width == 0:",
      "            if True:", "bank-conflicts pads rows by less than the access width (misaligned vector accesses)",
      tests=T_A3_SWIZZLE, topic="audit3"),
    # the verifier's protocol checks and overlap-mma's release placement
    M("verify-last-release-unchecked", "tkir/verify_pipeline.py", "if full.done[s] != empty.done[s]:",
      "if full.done[s] < empty.done[s]:", "the verifier accepts a stage filled more often than released",
      tests=T_A3_VERIFY, topic="audit3"),
    M("verify-expect-more-accepted", "tkir/verify_pipeline.py", 'if got != op.attrs["bytes"]:',
      'if got > op.attrs["bytes"]:', "the verifier accepts an expect that announces more bytes than land",
      tests=T_A3_VERIFY, topic="audit3"),
    M("verify-committed-cp-groups-ignored", "tkir/verify_pipeline.py",
      "for group in [role.cp_open, *role.cp_groups]:", "for group in [role.cp_open]:",
      "the verifier lets a stage be read while its committed cp.async group is in flight", tests=T_A3_VERIFY,
      topic="audit3"),
    M("overlap-release-before-wait", "passes/overlap_mma.py",
      'between = [op for op in blk.ops[i + 1:blk.ops.index(first)] if op.name == "pipe.arrive"]',
      "between = []", "overlap-mma leaves the release of M1's stage before M1's wait", tests=T_A3_OVERLAP,
      topic="audit3"),
]

# overlap-mma{fence_wait}: the fence that keeps the softmax ahead of the second mma's wait in the SASS
T_FENCE_WAIT = ("tests/filecheck/test_filecheck.py", "-k", "overlap-mma-fence")
MUTANTS += [
    M("fence-wait-not-emitted", "backend/context.py", '                fence_acq_rel(self.w, "cta")',
      "                pass", "tk.mma_wait {fence = true} lowers to the wait alone", tests=T_FENCE_WAIT,
      topic="fence-wait"),
    M("fence-wait-not-marked", "passes/overlap_mma.py", "            o_done.owner.attrs[WAIT_FENCE_ATTR] = True",
      "            pass", "overlap-mma{fence_wait=true} leaves the steady loop's wait unmarked", tests=T_FENCE_WAIT,
      topic="fence-wait"),
]

T_SPLIT_SUFFIX = ("tests/passes/test_split_masks_suffix.py", "tests/filecheck/test_filecheck.py", "-k",
                  "suffix or split_causal or only_the_first")
MUTANTS += [
    M("split-suffix-floor", "passes/split_masks.py", 'b.const(bd.a - 1)], "num"), b.const(bd.a)], "masked_end")',
      'b.const(0)], "num"), b.const(bd.a)], "masked_end")',
      "split-masks{suffix=true} rounds the last masked iteration down: a diagonal block runs unmasked",
      tests=T_SPLIT_SUFFIX, topic="split-suffix"),
    M("split-suffix-mask-kept-out", "passes/split_masks.py", "    second = _copy_without(loop, masks)",
      "    second = _copy_without(loop, [])",
      "the second loop of split-masks{suffix=true} keeps the masks (a loop that masks nothing it need not)",
      tests=T_SPLIT_SUFFIX, topic="split-suffix"),
]

# buffer lifetimes: overlap-mma's rotation hazard, the verifier's read-after-release proof, the interpreter's
# race check (tests/passes/test_overlap_hazard.py, tests/ir/test_interp_release.py)
T_LIFETIME = ("tests/passes/test_overlap_hazard.py", "tests/ir/test_interp_release.py",
              "tests/ir/test_verify_pipeline.py")
MUTANTS += [
    M("hazard-release-never-found", "passes/analysis.py",
      "if rel.name == \"pipe.arrive\" and id(rel) not in s1 \\",
      "if rel.name == \"pipe.arrived\" and id(rel) not in s1 \\",
      "overlap-mma's rotation_hazard never finds the release of a stage stage 1 reads: dK/dV's dV += P^T dO is "
      "rotated past dO's release", "safety", tests=T_LIFETIME, topic="lifetime"),
    M("verify-read-after-release-allowed", "tkir/verify_pipeline.py",
      "if seen == \"never\" or seen is None:", "if seen == \"never\":",
      "the protocol model lets a role read a stage it released (only a never-acquired stage is an error)",
      "safety", tests=T_LIFETIME, topic="lifetime"),
    M("verify-release-forgets-nothing", "tkir/verify_pipeline.py",
      "            role.seen[(id(buf), s)] = None", "            pass",
      "a release does not end the role's hold on the stage in the model", "safety", tests=T_LIFETIME,
      topic="lifetime"),
    M("verify-read-hazard-hidden", "tkir/verify_pipeline.py",
      "if getattr(e, READ_HAZARD, False):", "if False:",
      "a proved read-after-release behind a misplaced deferred arrive is reported as the arrive's place only",
      "diagnostics", tests=T_LIFETIME, topic="lifetime"),
    M("interp-release-not-recorded", "tkir/interp/pipeline.py",
      "if tile is None or op.attrs.get(\"deferred\") or not _consumer(frame):", "if True:",
      "the interpreter records no release: a read after release computes with whatever the stage holds",
      "safety", tests=T_LIFETIME, topic="lifetime"),
    M("verify-release-before-fill-allowed", "tkir/verify_pipeline.py",
      "if role.kind != \"producer\" and (held is None or held == \"never\") and id(buf) in self.fill_bar:",
      "if False:", "the protocol model lets a role release a stage it does not hold (before the fill's wait)",
      "safety", tests=T_LIFETIME, topic="lifetime"),
    M("verify-unwaited-arrival-allowed", "tkir/verify_pipeline.py",
      "if op.name == \"pipe.arrive\" and id(op.operands[0]) not in waited:", "if False:",
      "a barrier the consumers arrive on that no role waits on is accepted (a producer refills without waiting)",
      "safety", tests=T_LIFETIME, topic="lifetime"),
    M("interp-release-not-checked", "tkir/interp/pipeline.py",
      "            if at is not None:", "            if at is not None and False:",
      "the interpreter never flags a read of a released stage", "safety", tests=T_LIFETIME, topic="lifetime"),
]

# --- block-oracle: the cross-warp row combines, the Welford merge and the mask_causal rule, killed on the CPU by
# running one block of the kernels' LLVM text (tests/llvm_block_eval.py) -------------------------------------------
T_BLOCK_ORACLE = ("tests/backend/test_block_eval_rows.py",)
T_FP8_A = ("tests/backend/test_fp8_a_fragment.py",)
MUTANTS += [
    M("xwarp-last-part-dropped", "backend/exchange.py", "        for p in range(parts):",
      "        for p in range(parts - 1):", "a row's combine leaves out the last warp's partial",
      tests=T_BLOCK_ORACLE, topic="block-oracle"),
    M("xwarp-last-partial-only", "backend/exchange.py", "acc = v if acc is None else combine(cx, fop, acc, v)",
      "acc = v", "a row's combine keeps the last warp's partial only", tests=T_BLOCK_ORACLE, topic="block-oracle"),
    M("xwarp-part-from-div", "backend/exchange.py", 'part = w.op(f"urem i32 {warp}, {parts}", "part")',
      'part = w.op(f"udiv i32 {warp}, {parts}", "part")', "a warp's part index is warp / parts, not warp mod parts",
      tests=T_BLOCK_ORACLE, topic="block-oracle"),
    M("xwarp-row-stride", "backend/exchange.py", 'w.op(f"mul i32 {row}, {parts * k}", "rp")',
      'w.op(f"mul i32 {row}, {parts}", "rp")', "the (mean, M2) pairs of consecutive rows overlap in the scratch",
      tests=T_BLOCK_ORACLE, topic="block-oracle"),
    M("xwarp-no-barrier-before", "backend/exchange.py", "    _exchange_sync(cx, across)", "    pass",
      "no barrier before the partials' stores (a warp overwrites what another still reads)", occurrence=1,
      tests=T_BLOCK_ORACLE, topic="block-oracle"),
    M("xwarp-no-barrier-after", "backend/exchange.py", "    _exchange_sync(cx, across)", "    pass",
      "no barrier between the partials' stores and their loads", occurrence=2, tests=T_BLOCK_ORACLE,
      topic="block-oracle"),
    M("xwarp-stats-mean-skips-part", "backend/exchange.py", "for v in ms[1:]:", "for v in ms[2:]:",
      "the merged mean leaves out the second warp's mean", tests=T_BLOCK_ORACLE, topic="block-oracle"),
    M("xwarp-stats-dev-half", "backend/exchange.py", "f32_literal(float(n))", "f32_literal(float(n) / 2)",
      "the between-warps term of M2 weighted n / 2, not n", tests=T_BLOCK_ORACLE, topic="block-oracle"),
    M("xwarp-stats-no-dev", "backend/exchange.py", 'out_m2.append(combine(cx, "add", m2, w.op(',
      "out_m2.append(m2 if 1 else (m2, w.op(", "the warps' M2 summed without the spread of their means",
      tests=T_BLOCK_ORACLE, topic="block-oracle"),
    M("welford-bfly-mean-quarter", "backend/rules_registers.py", "f32_literal(0.5)}', 'hd')",
      "f32_literal(0.25)}', 'hd')", "a butterfly step moves the mean a quarter of the way, not half",
      tests=T_BLOCK_ORACLE, topic="block-oracle"),
    M("welford-bfly-dev-count", "backend/rules_registers.py", "f32_literal(n / 2)", "f32_literal(n)",
      "a butterfly step weights d^2 by n, not n / 2", tests=T_BLOCK_ORACLE, topic="block-oracle"),
    M("welford-bfly-count-fixed", "backend/rules_registers.py", "n, step = 2 * n, 2 * step",
      "n, step = n, 2 * step", "the butterfly's count does not double per step", tests=T_BLOCK_ORACLE,
      topic="block-oracle"),
    M("welford-bfly-last-step", "backend/rules_registers.py", "while lanes > step:", "while lanes > 2 * step:",
      "the Welford butterfly stops one step early", tests=T_BLOCK_ORACLE, topic="block-oracle"),
    M("welford-thread-bessel", "backend/rules_registers.py", "inv_n = f32_literal(1.0 / len(vals))",
      "inv_n = f32_literal(1.0 / max(len(vals) - 1, 1))", "a thread's own mean divides by n - 1",
      tests=T_BLOCK_ORACLE, topic="block-oracle"),
    M("welford-thread-shift-sign", "backend/rules_registers.py", 'm2 = combine(cx, "sub", s2,',
      'm2 = combine(cx, "add", s2,', "a thread's M2 is s2 + s1^2 / n", tests=T_BLOCK_ORACLE, topic="block-oracle"),
    M("welford-part-count", "backend/rules_registers.py", "per_part = count * lanes", "per_part = count",
      "the warps' merge counts a thread's elements, not the warp's", tests=T_BLOCK_ORACLE, topic="block-oracle"),
    M("row-reduce-last-step", "backend/rules_registers.py", "while step < lanes:", "while 2 * step < lanes:",
      "a row reduction's butterfly stops one step early", tests=T_BLOCK_ORACLE, topic="block-oracle"),
    M("causal-coords-diagonal", "backend/rules_registers.py", 'masked = w.op(f"icmp sgt i32 {cr},',
      'masked = w.op(f"icmp sge i32 {cr},', "the per-slot causal mask also hides the diagonal",
      tests=T_BLOCK_ORACLE, topic="block-oracle"),
    M("causal-coords-transposed", "backend/rules_registers.py", 'f"sub i32 {c}, {r}"', 'f"sub i32 {r}, {c}"',
      "the per-slot causal mask compares r - c", tests=T_BLOCK_ORACLE, topic="block-oracle"),
    # the fp8 register A of wgmma (backend/rules_wgmma.py _op_fp8_acc_to_a, fragments.pack_a_fragment_fp8)
    M("fp8-a-shuffle-sources-swapped", "backend/rules_wgmma.py",
      "a, b = shfl_idx(cx, word, src0), shfl_idx(cx, word, src1)",
      "b, a = shfl_idx(cx, word, src0), shfl_idx(cx, word, src1)",
      "the fp8 A conversion puts the odd lane's columns first", tests=T_FP8_A, topic="fp8"),
    M("fp8-a-half-select-fixed", "backend/rules_wgmma.py", 'qh = w.op(f"lshr i32 {q}, 1", "qh")',
      'qh = w.op(f"lshr i32 {q}, 2", "qh")', "lanes q >= 2 keep the first 8-column chunk",
      tests=T_FP8_A, topic="fp8"),
    M("fp8-a-pairs-joined-8", "backend/llvm_text.py", "to i32', 'hi16')}, 16\", \"hi16\")",
      "to i32', 'hi16')}, 8\", \"hi16\")", "two fp8 cvt pairs joined into a word overlap",
      tests=T_FP8_A, topic="fp8"),
    M("fp8-carry-bytes-reversed", "backend/rules_core.py", "out += w.unpack_bytes(wd) if",
      "out += w.unpack_bytes(wd)[::-1] if", "an fp8 tile carried around a loop comes back with its bytes reversed",
      tests=T_FP8_A, topic="fp8"),
    M("fp8-a-pack-step", "backend/fragments.py", "base = mb * per_block + 16 * kk + 4 * j",
      "base = mb * per_block + 8 * kk + 4 * j", "the fp8 A registers of step kk overlap the previous step's",
      tests=T_FP8_A, topic="fp8"),
]

# shared vectors ring-buffered in a pipelined loop (tests/passes/test_pipeline_vectors.py, pipeline-vectors.tk)
T_SV_RING = ("tests/passes/test_pipeline_vectors.py", "tests/backend/test_vector_stage_copies.py",
             "tests/filecheck/test_filecheck.py", "-k", "pipeline-vectors or vector")
MUTANTS += [
    M("sv-ring-copy-coordinate", "backend/rules_pipe.py",
      'elem = [w.op(f"mul i32 {coords[-1]}, {n}", "x"), *reversed(coords[:-1])]',
      "elem = [coords[-1], *reversed(coords[:-1])]",
      "a shared vector's TMA box starts at its block index, not at index x length", tests=T_SV_RING,
      topic="sv-ring"),
    M("sv-ring-read-not-checked", "tkir/verify_pipeline.py",
      'or (isinstance(v.type, VectorType) and v.type.space == "sv" and v.type.dtype != "i64")', "or False",
      "the verifier's protocol model does not see reads of a vector's stage (a read after its release passes)",
      tests=T_SV_RING, topic="sv-ring"),
    M("sv-ring-release-early-declined", "passes/early_release.py",
      'return op.name == "tk.mma" or (op.name == "tk.load" and bool(op.results)',
      "return op.name == \"tk.mma\" or (False",
      "early-release leaves a loop with a ring-buffered vector on one ring", tests=T_SV_RING, topic="sv-ring"),
    M("sv-ring-one-dim-row", "backend/rules_sm80.py",
      'GlobalType(src.type.dtype, (1, *src.type.dims))), ["0", *coords]',
      'GlobalType(src.type.dtype, (*src.type.dims, 1))), [*coords, "0"]',
      "sm_80's cp.async of a one-dim tensor's vector reads a column, not the row", tests=T_SV_RING,
      topic="sv-ring"),
    M("sv-ring-tma-address-counted", "passes/plan_occupancy.py",
      'if op.name == "tma.load" and isinstance(op.operands[0].type, VectorType):',
      'if op.name == "tma.loaded" and isinstance(op.operands[0].type, VectorType):',
      "plan-occupancy counts a per-thread address for a vector's TMA copy", tests=T_SV_RING, topic="sv-ring"),
]
