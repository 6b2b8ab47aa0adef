"""A fuzzer for tkc: generated and mutated `.tk` programs and IR text, checked against one invariant.

Every input either compiles, or exits with status 1 and a located `file:line:col: error:`; never a
Python traceback, a hang (past the per-input timeout) or a crash (a signal, another exit status).

* `grammar_gen`: random derivations of frontend/grammar.lark (syntax-valid, semantics random);
* `kernel_gen`: typed random kernels (row-wise and matrix-product shapes) that mostly compile;
* `mutate`: token- and line-level mutations of any text (.tk or IR), boundary numbers, long names;
* `corpus`: the seeds (examples/*.tk, tests/frontend/bad/*.tk, the IR dump of every example after every pass);
* `inputs`: one deterministic input per (seed, index): its text and the `tkc` command line;
* `oracle`: runs one input through `tkir.cli.main` in a forked child with a timeout and classifies it;
* `campaign`: runs many inputs on worker processes and summarises (scripts/fuzz.py, tests/tools/test_fuzz.py).

docs/fuzzing.md describes the design and records the long run.
"""
