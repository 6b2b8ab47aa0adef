"""`tkc compile --emit c` on the GPU: a plain C program (main.c, written here) includes the generated
header, allocates the kernel's tensors with the driver API, copies deterministic inputs in, launches
through `tkir_<name>_launch` on a non-blocking stream, copies every tensor back and writes it to a
file; the outputs must match `tkir.interpret` on the same inputs (rel err < 1e-2). A second run with
sizes the kernel refuses must get CUDA_ERROR_INVALID_VALUE and the reason from `tkir_<name>_check`.

How the build finds its pieces (tests/c_build.py): the C compiler is $CC, else cc, gcc or clang on
$PATH; cuda.h comes from tkir.backend.toolchain.cuda_include_dir() ($CUDA_HOME, $CUDA_PATH, the nvidia
pip wheels, beside nvcc on $PATH, /usr/local/cuda*/include); the driver library is the very file the
Python runtime loaded as libcuda.so.1 (read back from /proc/self/maps), linked by path with an rpath to
its folder. A missing compiler, header or driver fails the test with that message; it never skips
where a GPU exists.

    python3 -m pytest -q tests/gpu/test_emit_c_gpu.py
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from c_build import RUN_TIMEOUT_S, cuda_include, libcuda, run_cc, size_names  # tests/ is on sys.path under pytest

import tkir
from tkir import symexpr
from tkir.backend.launch import LaunchDescription
from tkir.tools.examples import load_companion
from tkir.types import DTYPE_BYTES

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ROW_KERNELS = Path(__file__).resolve().parents[2] / "tests" / "data" / "rows"  # the row kernels with every knob
REL_ERR = 1e-2  # the C program against the interpreter, per output
SEED = 1234
CASES = [
    ("gemm", dict(M=256, K=192, N=512)),
    ("gemm", dict(M=200, K=136, N=264)),       # ragged in M, N and K: TMA fills and clips the edges
    ("softmax", dict(N=1000)),                 # no tensor maps; a partial last block of rows
    ("attention_fwd", dict(B=1, H=2, N=256)),  # rank-4 tensor maps, a 3-d grid
]
REFUSED = ("gemm", dict(M=256, K=100, N=512), "byte strides of A must be multiples of 16")
EXIT_REFUSED = 3
CUDA_ERROR_INVALID_VALUE = 1


def _main_c(name: str, header: str, launch: LaunchDescription) -> str:
    """main(DIR, sizes..., bytes of each tensor...): DIR/<tensor>.in -> GPU -> launch -> DIR/<tensor>.out."""
    p = f"tkir_{name}"
    tensors = [t.name for t in launch.tensors]
    assert not launch.scalars, "this harness passes no scalars"
    sizes = size_names(launch)
    n = len(tensors)
    zeros = ", ".join(["0"] * n + [f"z[{i}]" for i in range(len(sizes))])
    dev = ", ".join([f"d[{i}]" for i in range(n)] + [f"z[{i}]" for i in range(len(sizes))])
    names = ", ".join(f'"{t}"' for t in tensors)
    return f"""\
#include "{header}"
#include <stdio.h>
#include <stdlib.h>

#define NT {n}
#define NS {len(sizes)}

#define CHECK(call)                                                                          \\
    do {{                                                                                     \\
        CUresult err_ = (call);                                                              \\
        if (err_ != CUDA_SUCCESS) {{                                                          \\
            const char *name_ = NULL;                                                        \\
            cuGetErrorName(err_, &name_);                                                    \\
            fprintf(stderr, "%s failed: %s (%d)\\n", #call, name_ ? name_ : "?", (int)err_); \\
            return 1;                                                                        \\
        }}                                                                                    \\
    }} while (0)

static const char *names[NT] = {{{names}}};

static int file_io(const char *dir, const char *name, const char *ext, void *buf, size_t n, int write)
{{
    char path[4096];
    FILE *f;
    size_t done;
    snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
    f = fopen(path, write ? "wb" : "rb");
    if (f == NULL) {{
        fprintf(stderr, "cannot open %s\\n", path);
        return 1;
    }}
    done = write ? fwrite(buf, 1, n, f) : fread(buf, 1, n, f);
    fclose(f);
    if (done != n) {{
        fprintf(stderr, "%s: %zu of %zu bytes\\n", path, done, n);
        return 1;
    }}
    return 0;
}}

int main(int argc, char **argv)
{{
    const char *dir, *why;
    int64_t z[NS > 0 ? NS : 1];
    size_t bytes[NT];
    void *host[NT];
    CUdeviceptr d[NT];
    CUdevice device;
    CUcontext context;
    CUstream stream;
    CUresult rc;
    int i;
    if (argc != 2 + NS + NT) {{
        fprintf(stderr, "usage: %s DIR SIZES... BYTES...\\n", argv[0]);
        return 2;
    }}
    dir = argv[1];
    for (i = 0; i < NS; i++) z[i] = strtoll(argv[2 + i], NULL, 0);
    for (i = 0; i < NT; i++) bytes[i] = (size_t)strtoull(argv[2 + NS + i], NULL, 0);

    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&device, 0));
    CHECK(cuDevicePrimaryCtxRetain(&context, device));
    CHECK(cuCtxSetCurrent(context));

    why = {p}_check({zeros});
    if (why != NULL) {{
        rc = {p}_launch({zeros}, 0);
        printf("REFUSED %s\\nLAUNCH %d\\n", why, (int)rc);
        return {EXIT_REFUSED};
    }}
    CHECK({p}_load());
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (i = 0; i < NT; i++) {{
        host[i] = malloc(bytes[i] > 0 ? bytes[i] : 1);
        if (host[i] == NULL || file_io(dir, names[i], "in", host[i], bytes[i], 0)) return 1;
        CHECK(cuMemAlloc(&d[i], bytes[i]));
        CHECK(cuMemcpyHtoD(d[i], host[i], bytes[i]));
    }}
    CHECK(cuCtxSynchronize());  /* the copies (legacy stream) are done before the non-blocking stream runs */
    CHECK({p}_launch({dev}, stream));
    CHECK(cuStreamSynchronize(stream));
    for (i = 0; i < NT; i++) {{
        CHECK(cuMemcpyDtoH(host[i], d[i], bytes[i]));
        if (file_io(dir, names[i], "out", host[i], bytes[i], 1)) return 1;
        CHECK(cuMemFree(d[i]));
        free(host[i]);
    }}
    CHECK(cuStreamDestroy(stream));
    CHECK({p}_unload());
    CHECK(cuDevicePrimaryCtxRelease(device));
    printf("OK\\n");
    return 0;
}}
"""


def _path(name: str) -> Path:
    """examples/NAME.tk, or for the row kernels their copy with every schedule knob (tests/data/rows)."""
    return (ROW_KERNELS if name in ("layernorm", "rmsnorm", "softmax") else EXAMPLES) / f"{name}.tk"


def _build(name: str, folder: Path) -> tuple[Path, tkir.api.CompiledKernel]:
    k = tkir.compile(str(_path(name)))
    src = k.emit_c(name)
    (folder / f"{name}.c").write_text(src.c)
    (folder / f"{name}.h").write_text(src.h)
    (folder / "main.c").write_text(_main_c(name, src.header, k.launch))
    lib = libcuda()
    run_cc(["-std=c11", "-O1", "-Wall", "-isystem", str(cuda_include()), "main.c", f"{name}.c", str(lib),
            f"-Wl,-rpath,{lib.parent}", "-o", "prog"], folder)
    return folder / "prog", k


def _run(prog: Path, folder: Path, launch: LaunchDescription, sizes: dict[str, int]) -> subprocess.CompletedProcess[str]:
    nbytes = [DTYPE_BYTES[t.dtype] * int(np.prod([symexpr.evaluate(d, sizes) for d in t.dims]))
              for t in launch.tensors]
    argv = [str(folder)] + [str(sizes[s]) for s in size_names(launch)] + [str(b) for b in nbytes]
    return subprocess.run([str(prog), *argv], capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


@pytest.mark.gpu
@pytest.mark.parametrize("name,sizes", CASES, ids=[f"{n}-{'-'.join(f'{k}{v}' for k, v in s.items())}" for n, s in CASES])
def test_emit_c_program_matches_the_interpreter(name: str, sizes: dict[str, int], tmp_path: Path) -> None:
    prog, k = _build(name, tmp_path)
    companion = load_companion(str(_path(name)))
    inputs = companion.make_inputs(np.random.default_rng(SEED), sizes, {})
    for spec, arr in zip(k.launch.tensors, inputs, strict=True):
        (tmp_path / f"{spec.name}.in").write_bytes(np.ascontiguousarray(arr).tobytes())

    proc = _run(prog, tmp_path, k.launch, sizes)
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", proc.stdout + proc.stderr

    expected = [a.copy() for a in inputs]
    tkir.interpret(k, *expected)
    for spec, arr, want in zip(k.launch.tensors, inputs, expected, strict=True):
        got = np.frombuffer((tmp_path / f"{spec.name}.out").read_bytes(), dtype=arr.dtype).reshape(arr.shape)
        if spec.name not in companion.OUTPUTS:
            assert np.array_equal(got.view(np.uint8), arr.view(np.uint8)), f"input {spec.name} changed"
            continue
        got64, want64 = got.astype(np.float64), want.astype(np.float64)
        assert np.isfinite(got64).all(), f"{name} {sizes}: {spec.name} has unwritten (NaN) elements"
        rel = np.linalg.norm(got64 - want64) / np.linalg.norm(want64)
        assert rel < REL_ERR, f"{name} {sizes}: {spec.name} rel err {rel:.3e} against the interpreter"


@pytest.mark.gpu
def test_emit_c_program_refuses_bad_sizes(tmp_path: Path) -> None:
    name, sizes, why = REFUSED
    prog, k = _build(name, tmp_path)
    proc = _run(prog, tmp_path, k.launch, sizes)
    assert proc.returncode == EXIT_REFUSED, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"REFUSED {name}: ") and why in lines[0]
    assert lines[1] == f"LAUNCH {CUDA_ERROR_INVALID_VALUE}"
