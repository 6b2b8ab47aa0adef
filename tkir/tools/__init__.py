"""tkir's tools: drivers that use the compiler through its face (tkir.api), never part of a compile.

* `examples`: the example companions (examples/<name>.py) and the interpreter check against them;
* `check`: an example on the GPU against its companion's numpy reference, without torch;
* `timing`: how a kernel is timed on the GPU (L2 flushed, host lead, interleaved, medians), for bench and tune;
* `bench`: `tkc bench` and `tkc run` on the GPU: correctness on fresh inputs, then timing against a peer;
* `tune`, `tune_model`: `tkc tune` and `tkir.autotune`: a kernel's `@tune` space, its cost model, the cache;
* `auto_consts`: consts set to `auto`, chosen by the pipeline up to plan-occupancy;
* `report`: `tkc report`, the compiler's decisions (layouts, registers, accesses, bounds);
* `fuzz`: the fuzzer of tkc (docs/fuzzing.md).

A tool may import the core, the interpreter, the front end, the passes, the backend, `tkir.api` and
`tkir.cli`, but not the `tkir` package itself (tests/repo/test_import_layers.py). Importing this package
imports none of the tools.
"""
