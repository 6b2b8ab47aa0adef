"""`tkc compile --emit c` on the CPU: the generated C compiles (C11 -pedantic -Werror, C99, C++) for every
example, and, linked with a stand-in driver library (tests/data/emit_c/stub_driver.c) that prints each
driver call, it makes exactly the calls tkir.backend.runtime makes for the same arguments: the same
argument checks (accepted or refused), grid, block, shared memory, cuTensorMapEncodeTiled arguments,
kernel parameters, workspace and launch count. The size arithmetic (tkir.backend.c_expr) is compared
with tkir.symexpr on its own, under -fsanitize=undefined where the compiler has it.
tests/gpu/test_emit_c_gpu.py runs the C on a GPU.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

import pytest
from c_build import RUN_TIMEOUT_S, cuda_include, run_cc, size_names, ubsan_flags  # tests/ is on sys.path under pytest
from test_runtime import GEMM_LAUNCH, FakeCAI

import tkir
from tkir import symexpr
from tkir.backend import runtime
from tkir.backend.c_expr import DIV_ZERO, OVERFLOW, helpers_c, to_c
from tkir.backend.emit_c import CSources, c_name, emit_c
from tkir.backend.launch import LaunchDescription, read_launch
from tkir.backend.runtime import LaunchError
from tkir.cli import main
from tkir.types import DTYPE_BYTES

TESTS = Path(__file__).resolve().parents[1]  # tests/

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ROW_KERNELS = TESTS / "data" / "rows"  # the row kernels with every schedule knob (pass-test vehicles)
STUB = TESTS / "data" / "emit_c" / "stub_driver.c"
EXAMPLE_NAMES = sorted(p.stem for p in EXAMPLES.glob("*.tk"))
STREAM = 0x5151  # the stream handle the harness passes
BASE = 0x7F0000000000  # made-up device addresses, 4 GB apart
TYPESTRS = {"bf16": "<V2", "f16": "<f2", "f32": "<f4", "i32": "<i4", "u32": "<u4"}
PARAM_LETTERS = {"tensor_map": "m", "pointer": "p", "workspace": "p", "launch_count": "i"}
SCALAR_LETTERS = {"i32": "i", "u32": "u", "i64": "l", "f32": "f"}
CUDA_ERROR_INVALID_VALUE = 1
STREAM_K = ("canonicalize,legalize-mma,infer-layouts,select-swizzle,bank-conflicts,create-tma,plan-occupancy,"
            "pipeline,persistent{balanced_grid=false},stream-k,canonicalize")


def _kernel(name: str) -> Path:
    """examples/NAME.tk, or for the row kernels their copy with every schedule knob (tests/data/rows)."""
    return (ROW_KERNELS if name in ("layernorm", "rmsnorm", "softmax") else EXAMPLES) / f"{name}.tk"


# --- every example compiles ------------------------------------------------------------------------

@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_every_example_emits_c_that_compiles(example: str, tmp_path: Path) -> None:
    c_file = tmp_path / f"{example}.c"
    assert main(["compile", str(EXAMPLES / f"{example}.tk"), "--emit", "c", "-o", str(c_file)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{example}.c", f"{example}.h"]
    inc = str(cuda_include())
    for std in ("-std=c11", "-std=c99"):
        run_cc([std, "-Wall", "-Wextra", "-Werror", "-pedantic", "-isystem", inc, "-c", c_file.name, "-o",
                f"{example}.o"], tmp_path)
    run_cc(["-x", "c++", "-std=c++11", "-Wall", "-Wextra", "-Werror", "-isystem", inc, "-fsyntax-only",
            c_file.name], tmp_path)
    header = (tmp_path / f"{example}.h").read_text()
    assert f"CUresult tkir_{example}_launch(" in header and f"tkir_{example}_load(void)" in header


def test_cli_output_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """-o NAME.c writes NAME.c and NAME.h; the C prefix comes from NAME; without -o NAME.c it refuses."""
    out = tmp_path / "my-gemm.c"
    assert main(["compile", str(EXAMPLES / "gemm.tk"), "--emit", "c", "-o", str(out)]) == 0
    h = (tmp_path / "my-gemm.h").read_text()
    assert "#ifndef TKIR_MY_GEMM_H" in h and "CUresult tkir_my_gemm_launch(CUdeviceptr A" in h
    assert '#include "my-gemm.h"' in out.read_text()
    for argv in (["--emit", "c"], ["--emit", "c", "-o", str(tmp_path / "x.cu")], ["--emit", "c", "-o", str(tmp_path)]):
        assert main(["compile", str(EXAMPLES / "gemm.tk"), *argv]) == 1
        assert "tkc compile: error: --emit c writes a C source and its header: name the source with -o NAME.c" in \
            capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my-gemm.c", "my-gemm.h"]


def test_api_emit_c() -> None:
    k = tkir.compile(str(ROW_KERNELS / "softmax.tk"), D=512)
    src = k.emit_c()
    assert isinstance(src, CSources) and src.header == "softmax.h" and src.prefix == "tkir_softmax"
    assert "const char *tkir_softmax_check(CUdeviceptr X, CUdeviceptr Y, int64_t N);" in src.h
    assert "X: bf16[N, 512]" in src.h and "from: tkc compile" in src.h and "-D D=512" in src.h
    assert k.emit_c("rows", "include/rows.h").c.count('#include "include/rows.h"') == 1


def test_c_names() -> None:
    assert c_name("my-gemm.v2") == "my_gemm_v2" and c_name("") == "kernel"


# --- the size arithmetic -----------------------------------------------------------------------------

EXPRESSIONS = ["a / b", "a // b", "a % b", "cdiv(a, b)", "-a % b", "(3 - a) // 4", "min(a, b, c)", "max(a, b, c)",
               "a * b * c", "cdiv(a * b, c) + a - b", "-(a - b) * 2", "a * b // c", "7", "cdiv((a), b) % 5"]
ENVIRONMENTS = [dict(a=a, b=b, c=c) for a in (-7, -1, 0, 1, 7, 13, 2**40) for b in (-3, 2, 5, 2**31 - 1)
                for c in (1, -4, 3)]
ENVIRONMENTS += [dict(a=2**62, b=4, c=1), dict(a=-(2**63), b=-1, c=1), dict(a=5, b=0, c=0)]


def _python_value(expr: str, env: dict[str, int]) -> str:
    try:
        v = symexpr.evaluate(expr, env)
    except symexpr.SymExprError:
        return f"bad {DIV_ZERO}"
    return str(v) if -(2**63) <= v < 2**63 else f"bad {OVERFLOW}"


def test_size_arithmetic_matches_symexpr(tmp_path: Path) -> None:
    """Every expression over every environment: the C prints the value tkir.symexpr computes, or
    'bad N' where symexpr divides by zero or the result leaves int64_t (no intermediate here
    overflows unless the result does)."""
    names = {"a": "a", "b": "b", "c": "c"}
    body = []
    for expr in EXPRESSIONS:
        body += ["    bad = 0;",
                 f"    v = {to_c(expr, names, 'tkir_t')};",
                 '    if (bad != 0) printf("bad %d\\n", bad); else printf("%lld\\n", (long long)v);']
    program = (
        "#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n\n"
        + helpers_c("tkir_t")
        + "\nint main(int argc, char **argv)\n{\n    int bad = 0;\n    int *tkir_bad = &bad;\n"
        "    int64_t v, a, b, c;\n    if (argc != 4) return 2;\n"
        "    a = strtoll(argv[1], NULL, 0); b = strtoll(argv[2], NULL, 0); c = strtoll(argv[3], NULL, 0);\n"
        + "\n".join(body) + "\n    return 0;\n}\n"
    )
    (tmp_path / "exprs.c").write_text(program)
    run_cc(["-std=c99", "-Wall", "-Wextra", "-Werror", *ubsan_flags(tmp_path), "exprs.c", "-o", "exprs"], tmp_path)
    for env in ENVIRONMENTS:
        proc = subprocess.run([str(tmp_path / "exprs"), str(env["a"]), str(env["b"]), str(env["c"])],
                              capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        assert proc.returncode == 0, proc.stderr  # ubsan aborts on undefined behaviour
        for expr, line in zip(EXPRESSIONS, proc.stdout.splitlines(), strict=True):
            want = _python_value(expr, env)
            if line == f"bad {OVERFLOW}" and want != line:
                assert _intermediate_overflows(expr, env), (expr, env, line, want)
            else:
                assert line == want, (expr, env, line, want)


def _intermediate_overflows(expr: str, env: dict[str, int]) -> bool:
    """Whether some subexpression of `expr` leaves int64_t (then C may report the overflow)."""
    import ast

    tree = ast.parse(expr, mode="eval")
    for node in ast.walk(tree.body):
        try:
            v = symexpr.evaluate(ast.unparse(node), env)
        except symexpr.SymExprError:
            continue
        if not -(2**63) <= v < 2**63:
            return True
    return False


# --- the C launch makes the calls the Python runtime makes -------------------------------------------

# A launch description that stresses the C: C keywords and `stream` as names, a digit dim and an
# expression dim, floor division of negative values, min/max of three, every scalar type, a rank-1
# and a rank-3 tensor map, NUM_SMS in the grid, and a requirement text that needs escaping.
EXPRS_LAUNCH: dict[str, Any] = {
    "kernel": "exprs",
    "tensors": [{"name": "X", "dtype": "f32", "dims": ["R", "D"]},
                {"name": "Y", "dtype": "bf16", "dims": ["R", "D / 2", 8]},
                {"name": "int", "dtype": "f32", "dims": ["D"]}],
    "scalars": [{"name": "stream", "dtype": "u32"}, {"name": "big", "dtype": "i64"}, {"name": "eps", "dtype": "f32"}],
    "params": [{"name": "X_tma", "kind": "tensor_map", "tma": 0},
               {"name": "Y_tma", "kind": "tensor_map", "tma": 1},
               {"name": "int", "kind": "pointer", "dtype": "f32", "tensor": "int"},
               {"name": "R", "kind": "scalar", "dtype": "i32", "size": "R"},
               {"name": "h", "kind": "scalar", "dtype": "i32", "size": "(3 - R) // 4"},
               {"name": "m", "kind": "scalar", "dtype": "u32", "size": "-R % 7 + max(R, D, 5) - min(R, D, 9)"},
               {"name": "w", "kind": "scalar", "dtype": "i64", "size": "R * D * 1024 * 1024"},
               {"name": "stream", "kind": "scalar", "dtype": "u32", "scalar": "stream"},
               {"name": "big", "kind": "scalar", "dtype": "i64", "scalar": "big"},
               {"name": "int_tma", "kind": "tensor_map", "tma": 2},
               {"name": "eps", "kind": "scalar", "dtype": "f32", "scalar": "eps"}],
    "grid": ["cdiv(R - 1, 3)", "min(max(D // 64, 1), 4)", "min(NUM_SMS, R) % 5 + 1"],
    "block": [128],
    "dynamic_smem": 1000,
    "requires": [{"expr": "D % 32", "equals": 0, "why": 'D "quoted" ??= a multiple of 32 \\ */ /*'}],
    "tma": [{"param": "X_tma", "tensor": "X", "dtype": "f32", "rank": 2, "dims": ["D", "R"], "strides": ["D * 4"],
             "box": [32, 16], "elem_strides": [1, 1], "swizzle": 128, "l2_promotion": 256, "oob_fill": "zero"},
            {"param": "Y_tma", "tensor": "Y", "rank": 3, "dims": [8, "D / 2", "R"], "strides": [16, "D / 2 * 16"],
             "box": [8, 16, 4], "swizzle": 0, "l2_promotion": 0, "oob_fill": "nan"},
            {"param": "int_tma", "tensor": "int", "rank": 1, "dims": ["D"], "strides": [], "box": [16],
             "swizzle": 64, "l2_promotion": 64}],
}


def _example_launch(name: str, **kw: Any) -> tuple[str, LaunchDescription]:
    k = tkir.compile(str(_kernel(name)), **kw)
    return k.asm["ptx"], k.launch


# (description, sizes, pointer offsets by tensor index, scalars, NUM_SMS, substring of the refusal in
# both the C and the Python message, or None for a launch both accept, or "" for any refusal)
Case = tuple[str, dict[str, int], dict[int, int], list[float | int], int, str | None]
KERNELS: dict[str, Any] = {
    "gemm": (lambda: _example_launch("gemm"), [
        ("tiles", dict(M=256, K=192, N=512), {}, [], 132, None),
        ("ragged", dict(M=200, K=136, N=264), {}, [], 132, None),
        ("four SMs", dict(M=1024, K=64, N=1024), {}, [], 4, None),
        ("K * 2 not 16-byte", dict(M=256, K=100, N=512), {}, [], 132, "byte strides of A must be multiples of 16"),
        ("A 8-byte aligned", dict(M=256, K=192, N=512), {0: 8}, [], 132, "which needs a 16-byte aligned address"),
        ("C 1-byte aligned", dict(M=256, K=192, N=512), {2: 1}, [], 132, "is not aligned to its 2-byte elements"),
        ("M = 0", dict(M=0, K=192, N=512), {}, [], 132, "division by zero"),
        ("N past int32", dict(M=256, K=192, N=2**31), {}, [], 132, "does not fit the i32 parameter 'N'"),
    ]),
    "attention_fwd": (lambda: _example_launch("attention_fwd"), [
        ("B1 H2 N256", dict(B=1, H=2, N=256), {}, [], 132, None),
        ("H past the grid", dict(B=1, H=70000, N=64), {}, [], 132, "grid dim 1 = H"),
        ("N ragged", dict(B=2, H=1, N=200), {}, [], 132, None),
    ]),
    "softmax": (lambda: _example_launch("softmax"), [
        ("N 1000", dict(N=1000), {}, [], 132, None),
        ("X odd address", dict(N=64), {0: 1}, [], 132, "is not aligned to its 2-byte elements"),
        # rows read with 16-byte vector loads: one element into a buffer is refused (the `aligned` list)
        ("X one element in", dict(N=64), {0: 2}, [], 132, "vector accesses, which needs a 16-byte aligned address"),
        # X is read through ld.global.nc (readonly-loads): an in-place call is refused, an adjacent Y is not
        ("Y on X (in place)", dict(N=64), {1: -2**32}, [], 132, "argument 'Y' overlaps 'X'"),
        ("Y one row into X", dict(N=64), {1: -2**32 + 2 * 1024}, [], 132, "argument 'Y' overlaps 'X'"),
        ("Y right after X", dict(N=64), {1: -2**32 + 64 * 1024 * 2}, [], 132, None),
    ]),
    "transpose": (lambda: _example_launch("transpose"), [
        ("ragged N", dict(M=1024, N=744), {}, [], 132, None),
        ("M odd", dict(M=1001, N=744), {}, [], 132, "16-byte vector accesses"),
    ]),
    "linear": (lambda: _example_launch("linear"), [
        ("ragged", dict(M=1000, K=520, N=744), {}, [], 132, None),
    ]),
    "gemm_stream_k": (lambda: _example_launch("gemm", passes=STREAM_K), [
        ("ragged M and K", dict(M=3900, K=4000, N=1280), {}, [], 132, None),
        ("8 SMs", dict(M=640, K=1024, N=512), {}, [], 8, None),
    ]),
    "runtime_gemm": (lambda: ("// a stand-in PTX text\n", json.loads(json.dumps(GEMM_LAUNCH))), [
        ("alpha", dict(M=256, K=128, N=512), {}, [0.25], 132, None),
        ("M ragged", dict(M=200, K=128, N=512), {}, [1.0], 132, "M must be a multiple of BM=128"),
    ]),
    "exprs": (lambda: ("// a stand-in PTX text\n", json.loads(json.dumps(EXPRS_LAUNCH))), [
        ("R40 D64", dict(R=40, D=64), {}, [7, -(2**40), 0.5], 132, None),
        ("R7 D128 four SMs", dict(R=7, D=128), {}, [2**32 - 1, 3, -1.5], 4, None),
        ("R3 D32", dict(R=3, D=32), {}, [0, 0, 0.0], 132, None),
        ("R1: empty grid", dict(R=1, D=64), {}, [0, 0, 0.0], 132, "grid dim 0 = cdiv(R - 1, 3)"),
        ("D48", dict(R=40, D=48), {}, [0, 0, 0.0], 132, 'D "quoted" ??= a multiple of 32'),
        ("D past 2^32", dict(R=4, D=2**33), {}, [0, 0, 0.0], 132, "must be 1..2^32"),
        ("huge R", dict(R=2**61, D=64), {}, [0, 0, 0.0], 132, ""),
    ]),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, LaunchDescription, str]]:
    """Each kernel's C, linked with the stub driver and a harness main: name -> (binary, launch, ptx)."""
    root = tmp_path_factory.mktemp("emit_c")
    inc = str(cuda_include())
    ubsan = ubsan_flags(root)
    out = {}
    for name, (make, _) in KERNELS.items():
        ptx, launch = make()
        src = emit_c(ptx, launch, name)
        folder = root / name
        folder.mkdir()
        (folder / f"{name}.c").write_text(src.c)
        (folder / f"{name}.h").write_text(src.h)
        (folder / "main.c").write_text(_harness(src, read_launch(launch)))
        run_cc(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-isystem", inc, *ubsan, "main.c",
                f"{name}.c", str(STUB), "-o", "run"], folder)
        out[name] = (folder / "run", read_launch(launch), ptx)
    return out


def _harness(src: CSources, launch: LaunchDescription) -> str:
    """main(argv = tensor pointers, scalars, sizes): check, launch twice on STREAM, unload; JSON lines."""
    p = src.prefix
    tensors, scalars = launch.tensors, launch.scalars
    sizes = size_names(launch)
    ctypes = {"i32": "int32_t", "u32": "uint32_t", "i64": "int64_t", "f32": "float"}
    parse = {"i32": "strtoll", "u32": "strtoull", "i64": "strtoll"}
    decl, read = [], []
    for i, _ in enumerate(tensors):
        decl.append(f"    CUdeviceptr t{i};")
        read.append(f"    t{i} = (CUdeviceptr)strtoull(argv[a++], NULL, 0);")
    for i, s in enumerate(scalars):
        decl.append(f"    {ctypes[s.dtype]} s{i};")
        fn = "(float)strtod(argv[a++], NULL)" if s.dtype == "f32" else f"{parse[s.dtype]}(argv[a++], NULL, 0)"
        read.append(f"    s{i} = ({ctypes[s.dtype]}){fn};")
    for i, _ in enumerate(sizes):
        decl.append(f"    int64_t z{i};")
        read.append(f"    z{i} = strtoll(argv[a++], NULL, 0);")
    kinds = "".join(PARAM_LETTERS.get(q.kind) or SCALAR_LETTERS[q.dtype] for q in launch.params)
    t = [f"t{i}" for i in range(len(tensors))]
    s = [f"s{i}" for i in range(len(scalars))]
    z = [f"z{i}" for i in range(len(sizes))]
    nargs = 1 + len(t) + len(s) + len(z)
    return f"""\
#include "{src.header}"
#include <stdio.h>
#include <stdlib.h>

extern const char *stub_param_kinds;

static void print_json_string(const char *text)
{{
    if (text == NULL) {{
        printf("null");
        return;
    }}
    putchar('"');
    for (; *text; text++) {{
        if (*text == '"' || *text == '\\\\') putchar('\\\\');
        putchar(*text);
    }}
    putchar('"');
}}

int main(int argc, char **argv)
{{
    int a = 1, i;
    const char *why;
    CUresult rc;
{chr(10).join(decl)}
    if (argc != {nargs}) {{
        return 2;
    }}
{chr(10).join(read)}
    stub_param_kinds = "{kinds}";
    why = {p}_check({", ".join(t + z) or ""});
    printf("{{\\"call\\": \\"check\\", \\"why\\": ");
    print_json_string(why);
    printf("}}\\n");
    for (i = 0; i < 2; i++) {{
        rc = {p}_launch({", ".join(t + s + z + [f"(CUstream)(uintptr_t){STREAM}"])});
        printf("{{\\"call\\": \\"launch\\", \\"result\\": %d}}\\n", (int)rc);
    }}
    rc = {p}_unload();
    printf("{{\\"call\\": \\"unload\\", \\"result\\": %d}}\\n", (int)rc);
    return 0;
}}
"""


def _cases() -> list[tuple[str, str]]:
    return [(name, case[0]) for name, (_, cases) in KERNELS.items() for case in cases]


@pytest.mark.parametrize("kernel,case", _cases())
def test_c_launch_makes_the_runtimes_calls(kernel: str, case: str, built: dict, tmp_path: Path) -> None:
    binary, launch, ptx = built[kernel]
    _, sizes, offsets, scalars, sms, refusal = next(c for c in KERNELS[kernel][1] if c[0] == case)
    ptrs = [BASE + i * 2**32 + offsets.get(i, 0) for i in range(len(launch.tensors))]
    argv = [str(v) for v in ptrs] + [repr(v) for v in scalars] + [str(sizes[n]) for n in size_names(launch)]
    ptx_out = tmp_path / "loaded.ptx"
    proc = subprocess.run([str(binary), *argv], capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          env={"STUB_SMS": str(sms), "STUB_PTX_OUT": str(ptx_out), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stdout + proc.stderr  # ubsan aborts on undefined behaviour
    calls = [json.loads(line) for line in proc.stdout.splitlines()]
    by = lambda name: [c for c in calls if c["call"] == name]  # noqa: E731

    arrays = [FakeCAI(tuple(symexpr.evaluate(d, sizes) for d in t.dims), TYPESTRS[t.dtype], ptr=ptr)
              for t, ptr in zip(launch.tensors, ptrs, strict=True)]
    try:
        bound = runtime.bind(launch, (*arrays, *scalars), sms)
    except LaunchError as e:
        bound, python_error = None, str(e)

    assert len(by("cuModuleLoadData")) == 1 and ptx_out.read_text() == ptx  # loaded once, the PTX exactly
    assert by("cuModuleGetFunction") == [{"call": "cuModuleGetFunction", "module_ok": 1, "name": launch.kernel}]
    assert by("unload") == [{"call": "unload", "result": 0}] and len(by("cuModuleUnload")) == 1
    smem_attr = by("cuFuncSetAttribute")
    if launch.dynamic_smem > runtime.STATIC_SMEM_LIMIT:
        assert smem_attr == [{"call": "cuFuncSetAttribute", "function_ok": 1, "attrib": 8,  # MAX_DYNAMIC_SHARED_SIZE_BYTES
                              "value": launch.dynamic_smem}]
    else:
        assert smem_attr == []

    why = by("check")[0]["why"]
    if refusal is not None:
        assert bound is None, f"the runtime accepts {sizes}, the test expects a refusal"
        assert why is not None and why.startswith(f"{launch.kernel}: ")
        assert refusal in why and refusal in python_error, (why, python_error)
        assert [c["result"] for c in by("launch")] == [CUDA_ERROR_INVALID_VALUE] * 2
        assert not by("cuLaunchKernel") and not by("cuTensorMapEncodeTiled")
        return
    assert bound is not None, python_error
    assert why is None and [c["result"] for c in by("launch")] == [0, 0]

    encodes = {c["map"]: c for c in by("cuTensorMapEncodeTiled")}
    workspaces = [c["ptr"] for c in by("cuMemAlloc")]
    assert [c["bytes"] for c in by("cuMemAlloc")] == [v[1] for k, v in bound.params if k == "workspace"]
    for n, launched in enumerate(by("cuLaunchKernel")):
        assert launched["function_ok"] == 1 and launched["extra_null"] == 1 and launched["stream"] == STREAM
        assert tuple(launched["grid"]) == bound.grid and tuple(launched["block"]) == bound.block
        assert launched["smem"] == bound.dynamic_smem
        assert len(launched["params"]) == len(bound.params)
        ws = iter(workspaces)
        for (kind, value), (c_kind, c_value, *rest) in zip(bound.params, launched["params"], strict=True):
            if kind == "tensor_map":
                assert c_kind == "map" and rest == [0]  # a 64-byte aligned parameter
                enc = encodes[c_value]
                assert enc["map_align"] == 0
                want = runtime.encode_args(value)
                got = (enc["dtype"], enc["rank"], enc["address"], enc["dims"], enc["strides"], enc["box"],
                       enc["elem_strides"], enc["interleave"], enc["swizzle"], enc["l2"], enc["oob"])
                assert got == want, (value.param, got, want)
            elif kind == "pointer":
                assert [c_kind, c_value] == ["pointer", value]
            elif kind == "workspace":
                assert [c_kind, c_value] == ["pointer", next(ws)]
            elif kind == "launch_count":
                assert [c_kind, c_value] == ["i32", n + 1]
            elif kind == "f32":
                assert c_kind == "f32" and math.isclose(c_value, value, rel_tol=1e-7)
            else:
                assert [c_kind, c_value] == [kind, value]
    assert len(by("cuLaunchKernel")) == 2
    assert len(encodes) == 2 * len(launch.tma)
    if workspaces:  # zeroed once at load, freed at unload
        assert [c["ptr"] for c in by("cuMemsetD8")] == workspaces and len(by("cuCtxSynchronize")) == 1
        assert [c["ptr"] for c in by("cuMemFree")] == workspaces


def test_negative_sizes_are_refused(built: dict) -> None:
    binary, launch, _ = built["gemm"]
    argv = [str(BASE), str(BASE + 2**32), str(BASE + 2**33), "256", "-64", "512"]
    proc = subprocess.run([str(binary), *argv], capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    calls = [json.loads(line) for line in proc.stdout.splitlines()]
    assert calls[0] == {"call": "check", "why": "gemm: size K is negative"}
    assert [c["result"] for c in calls if c["call"] == "launch"] == [CUDA_ERROR_INVALID_VALUE] * 2


def test_header_documents_the_call() -> None:
    ptx, launch = "// stand-in\n", json.loads(json.dumps(EXPRS_LAUNCH))
    src = emit_c(ptx, launch, "exprs")
    assert ("CUresult tkir_exprs_launch(CUdeviceptr X, CUdeviceptr Y, CUdeviceptr int_, uint32_t stream_, "
            "int64_t big, float eps, int64_t R, int64_t D, CUstream stream);") in src.h
    assert "const char *tkir_exprs_check(CUdeviceptr X, CUdeviceptr Y, CUdeviceptr int_, int64_t R, int64_t D);" in src.h
    assert "Y: bf16[R, D / 2, 8], C-contiguous (row-major) device memory, 16-byte aligned (a TMA tensor map)" in src.h
    assert "R: size R (X dim 0, Y dim 0)" in src.h and "D: size D (X dim 1, int dim 0)" in src.h
    assert src.h.split("#ifndef")[0].count("*/") == 1  # the requirement text cannot end the banner comment
    assert '"exprs: D \\"quoted\\" \\?\\?= a multiple of 32 \\\\ */ /* (D % 32 must be 0)"' in src.c


# --- the GPU test's program, run here on the stub driver ---------------------------------------------

@pytest.mark.parametrize("name,sizes", [("gemm", dict(M=200, K=136, N=264)), ("softmax", dict(N=40)),
                                        ("attention_fwd", dict(B=1, H=2, N=256))])
def test_gpu_test_program_runs_on_the_stub(name: str, sizes: dict[str, int], tmp_path: Path) -> None:
    """tests/gpu/test_emit_c_gpu.py's main.c, built against the stub driver (host memory, a launch that
    computes nothing): it parses its arguments, moves every tensor through "device" memory and back
    unchanged, and reports a refused launch; so the GPU run can only differ in the kernel's results."""
    import numpy as np
    from test_emit_c_gpu import EXIT_REFUSED, REFUSED, _main_c, _run

    k = tkir.compile(str(_kernel(name)))
    src = k.emit_c(name)
    (tmp_path / f"{name}.c").write_text(src.c)
    (tmp_path / f"{name}.h").write_text(src.h)
    (tmp_path / "main.c").write_text(_main_c(name, src.header, k.launch))
    run_cc(["-std=c11", "-Wall", "-Wextra", "-Werror", "-isystem", str(cuda_include()), *ubsan_flags(tmp_path),
            "main.c", f"{name}.c", str(STUB), "-o", "prog"], tmp_path)
    rng = np.random.default_rng(0)
    for t in k.launch.tensors:
        shape = [symexpr.evaluate(d, sizes) for d in t.dims]
        (tmp_path / f"{t.name}.in").write_bytes(rng.integers(0, 256, DTYPE_BYTES[t.dtype] * math.prod(shape),
                                                             dtype=np.uint8).tobytes())
    proc = _run(tmp_path / "prog", tmp_path, k.launch, sizes)
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == "OK", proc.stdout + proc.stderr
    launched = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"call": "cuLaunchKernel"')]
    assert len(launched) == 1 and launched[0]["stream"] == 0x5E  # the program's non-blocking stream
    for t in k.launch.tensors:
        assert (tmp_path / f"{t.name}.out").read_bytes() == (tmp_path / f"{t.name}.in").read_bytes()

    if name == REFUSED[0]:
        proc = _run(tmp_path / "prog", tmp_path, k.launch, REFUSED[1])
        assert proc.returncode == EXIT_REFUSED, proc.stdout + proc.stderr
        lines = [line for line in proc.stdout.splitlines() if not line.startswith("{")]
        assert lines[0].startswith(f"REFUSED {name}: ") and REFUSED[2] in lines[0]
        assert lines[1] == f"LAUNCH {CUDA_ERROR_INVALID_VALUE}"
