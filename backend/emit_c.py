"""`tkc compile --emit c`: a self-contained C source and header that launch a compiled kernel.

    src = emit_c(ptx, launch, "gemm")     # CSources: .c (the PTX embedded), .h, the header's file name
    Path("gemm.c").write_text(src.c); Path("gemm.h").write_text(src.h)

The header declares, for a name `gemm` (prefix `tkir_gemm`):

    CUresult    tkir_gemm_load(void);      load the embedded PTX into the current context (once)
    CUresult    tkir_gemm_unload(void);
    const char *tkir_gemm_check(A, B, C, M, K, N);          NULL, or why a launch would be refused
    CUresult    tkir_gemm_launch(A, B, C, M, K, N, stream);

Arguments are the kernel's tensors (CUdeviceptr) and scalars in the order Python's `k(...)` takes
them, then its sizes (int64_t, in the launch description's order: first appearance in the tensor
dims), then the stream. The C mirrors tkir.backend.runtime exactly: the same argument checks
(`requires`, element and TMA alignment, grid range, tensor-map dims, strides and reach, size
parameters that must fit their PTX type), the same size arithmetic (tkir.backend.c_expr: floor
division, checked int64_t), the same cuTensorMapEncodeTiled arguments, the same parameter order,
workspace and launch-count parameters, the opt-in dynamic shared memory attribute. A refused launch
returns CUDA_ERROR_INVALID_VALUE and launches nothing; `check` returns the reason as a static string.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tkir.backend import runtime
from tkir.backend.c_expr import BAD_VAR, helpers_c, to_c, used_helpers
from tkir.backend.launch import (
    LaunchCountParam,
    LaunchDescription,
    PointerParam,
    SizeParam,
    TensorArg,
    TensorMapParam,
    TmaSpec,
    WorkspaceParam,
    read_launch,
)
from tkir.types import DTYPE_BYTES

# C types of the launch description's scalar dtypes (runtime.SCALAR_CTYPES).
C_SCALAR_TYPES = {"i32": "int32_t", "u32": "uint32_t", "i64": "int64_t", "f32": "float"}
SCALAR_RANGES = {"i32": runtime.I32_RANGE, "u32": runtime.U32_RANGE, "i64": (-(2**63), 2**63 - 1)}
PTX_BYTES_PER_LINE = 16
# Words a C or C++ compiler, or cuda.h and stdint.h, give a meaning: an argument (tensor, scalar or
# size) named like one gets a trailing '_' in the C (so does `stream`, the launch's own parameter),
# as does a name with one of the prefixes below (the generated code's own names, cuda.h's, stdint.h's).
C_RESERVED = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline int long
register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
_Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn _Static_assert _Thread_local
alignas alignof and and_eq asm bitand bitor bool catch char8_t char16_t char32_t class compl concept consteval
constexpr constinit const_cast co_await co_return co_yield decltype delete dynamic_cast explicit export false
friend mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public
reinterpret_cast requires static_assert static_cast template this thread_local throw true try typeid typename
using virtual wchar_t xor xor_eq NULL EOF assert errno offsetof size_t ptrdiff_t uintptr_t intptr_t stream
""".split())
_RESERVED_PREFIXES = ("tkir_", "TKIR_", "__", "CU_", "CUDA_", "INT", "UINT", "cuuint")


@dataclass(frozen=True)
class CSources:
    """The generated files: `c` includes `header` by that file name."""

    c: str
    h: str
    header: str
    prefix: str


def c_name(name: str) -> str:
    """A file stem or kernel name as the middle of C identifiers: `my-gemm` -> `my_gemm`."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return out or "kernel"


def emit_c(ptx: str, launch: LaunchDescription | dict | str, name: str | None = None, header: str | None = None,
           provenance: str = "") -> CSources:
    """The C source and header of a kernel; `name` (default: the kernel's) makes the prefix
    `tkir_<name>`, `header` is the header's file name (default `<name>.h`), `provenance` a line for
    the banner (what it was compiled from)."""
    spec = read_launch(launch)
    base = c_name(name or spec.kernel)
    gen = _Generator(ptx, spec, f"tkir_{base}", header or f"{name or spec.kernel}.h", provenance)
    return CSources(c=gen.source(), h=gen.header(), header=gen.header_name, prefix=gen.p)


class _Generator:
    def __init__(self, ptx: str, launch: LaunchDescription, prefix: str, header_name: str, provenance: str):
        self.ptx, self.launch, self.p, self.header_name = ptx, launch, prefix, header_name
        self.P = prefix.upper()
        self.kernel: str = launch.kernel
        self.provenance = provenance
        self.tensors = launch.tensors
        self.scalars = launch.scalars
        self.sizes: list[str] = []
        for t in self.tensors:  # the names runtime._bind_sizes binds from shapes, in the same order
            for d in t.dims:
                if isinstance(d, str) and d.isidentifier() and d not in self.sizes:
                    self.sizes.append(d)
        taken: set[str] = set()
        self.cname: dict[str, str] = {}
        for n in [t.name for t in self.tensors] + [s.name for s in self.scalars] + self.sizes:
            self.cname[n] = _unique_ident(n, taken)
        self.tma_tensors = {t.tensor for t in launch.tma}
        self.aligned = {a.tensor: a for a in launch.aligned}
        self.readonly = list(launch.readonly)
        self.workspaces = [p for p in launch.params if isinstance(p, WorkspaceParam)]
        self.counts = any(isinstance(p, LaunchCountParam) for p in launch.params)

    # --- names and strings ----------------------------------------------------------------------

    def size_names(self, num_sms: str | None = None) -> dict[str, str]:
        names = {"NUM_SMS": num_sms} if num_sms else {}
        names.update({s: self.cname[s] for s in self.sizes})
        return names

    def expr(self, e: str | int, num_sms: str | None = None) -> str:
        return to_c(e, self.size_names(num_sms), self.p)

    def msg(self, text: str) -> str:
        return _c_string(f"{self.kernel}: {text}")

    # --- the header -------------------------------------------------------------------------------

    def tensor_args(self) -> list[str]:
        return [f"CUdeviceptr {self.cname[t.name]}" for t in self.tensors]

    def scalar_args(self) -> list[str]:
        return [f"{C_SCALAR_TYPES[s.dtype]} {self.cname[s.name]}" for s in self.scalars]

    def size_args(self) -> list[str]:
        return [f"int64_t {self.cname[s]}" for s in self.sizes]

    def check_args(self) -> str:
        return ", ".join(self.tensor_args() + self.size_args()) or "void"

    def launch_args(self) -> str:
        return ", ".join(self.tensor_args() + self.scalar_args() + self.size_args() + ["CUstream stream"])

    def header(self) -> str:
        p, P, L = self.p, self.P, self.launch
        lines = [f"/* {_comment(self.header_name)}: C API of the tkir kernel '{_comment(self.kernel)}', "
                 "generated by tkc compile --emit c; do not edit."]
        if self.provenance:
            lines.append(f" * {_comment(self.provenance)}")
        ptx_version, ptx_target = _ptx_directive(self.ptx, "version"), _ptx_directive(self.ptx, "target")
        stem = self.header_name.removesuffix(".h")
        lines += [
            " *",
            f" * The PTX (ISA {ptx_version}, {ptx_target}) is embedded in {_comment(stem)}.c; the CUDA driver",
            " * compiles it for the GPU when the module is loaded. Build with cuda.h of CUDA 12.0 or later and",
            f" * link with the driver library: cc -I<cuda>/include app.c {_comment(stem)}.c -lcuda. Every",
            " * function needs a current CUDA context on the calling thread (e.g. cuDevicePrimaryCtxRetain",
            " * and cuCtxSetCurrent).",
            " *",
            f" * {p}_load()",
            " *     Loads the module into the current context, once (launch calls it if needed). Not",
            " *     thread-safe: call it before launching from several threads.",
            f" * {p}_launch()",
            " *     Checks the arguments, encodes the TMA descriptors and launches on `stream`, asynchronously",
            " *     like cuLaunchKernel. A refused launch returns CUDA_ERROR_INVALID_VALUE and launches",
            f" *     nothing; {p}_check() says why.",
            f" * {p}_check()",
            f" *     NULL when {p}_launch() would accept these tensors and sizes, else the reason",
            " *     (a static string).",
            f" * {p}_unload()",
            " *     Unloads the module (and frees the workspace, if any).",
            " *",
            " * Arguments:",
        ]
        for t in self.tensors:
            dims = ", ".join(str(d) for d in t.dims)
            tma = (", 16-byte aligned (a TMA tensor map)" if t.name in self.tma_tensors
                   else f", {self.aligned[t.name].bytes}-byte aligned" if t.name in self.aligned else "")
            lines.append(f" *   {self.cname[t.name]}: {t.dtype}[{_comment(dims)}], C-contiguous (row-major) "
                         f"device memory{tma}")
        for s in self.scalars:
            lines.append(f" *   {self.cname[s.name]}: {C_SCALAR_TYPES[s.dtype]} scalar ({s.dtype})")
        for s in self.sizes:
            where = ", ".join(f"{t.name} dim {i}" for t in self.tensors for i, d in enumerate(t.dims) if d == s)
            lines.append(f" *   {self.cname[s]}: size {s} ({where})")
        lines.append(" *   stream: the CUDA stream (0: the legacy default stream)")
        if L.requires:
            lines += [" *", " * Requirements (else the launch is refused):"]
            for r in L.requires:
                why = r.why if r.why is not None else ""
                lines.append(f" *   {_comment(str(r.expr))} == {r.equals}: {_comment(why)}")
        if self.workspaces or self.counts:
            lines += [" *", " * Stream-K: the module keeps a workspace (allocated and zeroed by load) and a launch",
                      " * counter; do not run two launches of it at the same time."]
        lines += [
            " */",
            f"#ifndef {P}_H",
            f"#define {P}_H",
            "",
            "#include <cuda.h>",
            "#include <stdint.h>",
            "",
            "#ifdef __cplusplus",
            'extern "C" {',
            "#endif",
            "",
            f"#define {P}_BLOCK_THREADS {math.prod(L.block)}  /* threads per block */",
            f"#define {P}_DYNAMIC_SMEM {L.dynamic_smem}  /* bytes of dynamic shared memory per block */",
            "",
            f"CUresult {p}_load(void);",
            f"CUresult {p}_unload(void);",
            f"const char *{p}_check({self.check_args()});",
            f"CUresult {p}_launch({self.launch_args()});",
            "",
            "#ifdef __cplusplus",
            "}",
            "#endif",
            "",
            f"#endif /* {P}_H */",
            "",
        ]
        return "\n".join(lines)

    # --- the source -----------------------------------------------------------------------------

    def source(self) -> str:
        p = self.p
        parts = [
            f"/* {_comment(self.header_name.removesuffix('.h'))}.c: the tkir kernel '{_comment(self.kernel)}' "
            f"for C; generated by tkc compile --emit c; do not edit.",
        ]
        if self.provenance:
            parts.append(f" * {_comment(self.provenance)}")
        parts += [f" * See {_comment(self.header_name)} for the API. */",
                  f'#include "{_c_string(self.header_name)[1:-1]}"',
                  "",
                  "#include <stddef.h>",
                  "#include <stdint.h>",
                  "",
                  self.align_macro(),
                  self.ptx_array(),
                  self.state()]
        code = [self.plan_struct(), self.plan_function(), self.check_function(), self.load_function(),
                self.unload_function(), self.launch_function()]
        helpers = helpers_c(p, used_helpers("\n".join(code), p))
        return "\n".join(parts + [helpers] + code)

    def align_macro(self) -> str:
        P = self.P
        return f"""\
/* Tensor maps: the driver wants 64-byte alignment, CUDA 13's cuda.h declares 128 (C11 / C++11 only). */
#if defined(__cplusplus) && __cplusplus >= 201103L
#define {P}_ALIGN128 alignas(128)
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define {P}_ALIGN128 _Alignas(128)
#elif defined(__GNUC__)
#define {P}_ALIGN128 __attribute__((aligned(128)))
#elif defined(_MSC_VER)
#define {P}_ALIGN128 __declspec(align(128))
#else
#error "{self.header_name.removesuffix('.h')}.c needs C11, C++11, GCC/Clang or MSVC to align its tensor maps"
#endif
"""

    def ptx_array(self) -> str:
        data = self.ptx.encode("utf-8") + b"\0"  # cuModuleLoadData reads PTX text up to its NUL
        rows = []
        for i in range(0, len(data), PTX_BYTES_PER_LINE):
            rows.append("    " + ", ".join(f"0x{b:02x}" for b in data[i:i + PTX_BYTES_PER_LINE]) + ",")
        return (f"/* The PTX of kernel '{_comment(self.kernel)}', NUL-terminated ({len(data) - 1} bytes of text; "
                f"tkc compile --emit ptx prints it). */\n"
                f"static const unsigned char {self.p}_ptx[{len(data)}] = {{\n" + "\n".join(rows) + "\n};\n")

    def state(self) -> str:
        p, P = self.p, self.P
        lines = [
            "/* Module state: set by load, cleared by unload. */",
            f"static CUmodule {p}_module;",
            f"static CUfunction {p}_function;",
            f"static int64_t {p}_num_sms;  /* the device's multiprocessor count (NUM_SMS in the grid) */",
        ]
        for i, w in enumerate(self.workspaces):
            lines.append(f"static CUdeviceptr {p}_workspace{i};  /* workspace '{_comment(w.name)}' */")
        if self.counts:
            lines.append(f"static int32_t {p}_launches;  /* launch_count: 1 on the first launch, then 2, ... */")
        lines += [
            "",
            f"#define {P}_KERNEL \"{_c_string(self.kernel)[1:-1]}\"",
            f"#define {P}_DEFAULT_NUM_SMS {runtime.DEFAULT_NUM_SMS}  /* what check assumes before load: "
            "an H100/H200 (tkir.target) */",
            "",
        ]
        return "\n".join(lines)

    def plan_struct(self) -> str:
        lines = [f"/* What {self.p}_plan computes from the arguments: the launch geometry, the tensor-map dims",
                 " * and strides, and the size parameters. */",
                 f"struct {self.p}_plan {{",
                 "    unsigned int grid[3];"]
        for i, t in enumerate(self.launch.tma):
            rank = len(t.dims)
            lines.append(f"    cuuint64_t tma{i}_dims[{rank}];  /* {_comment(t.param)}, innermost first */")
            lines.append(f"    cuuint64_t tma{i}_strides[{max(rank - 1, 1)}];  /* bytes */")
        for i, prm in enumerate(self.launch.params):
            if isinstance(prm, SizeParam):
                lines.append(f"    {C_SCALAR_TYPES[prm.dtype]} param{i};  /* {_comment(prm.name)} = "
                             f"{_comment(str(prm.size))} */")
        lines += ["};", ""]
        return "\n".join(lines)

    def _eval(self, dst: str, expr: str | int, num_sms: str | None = None) -> list[str]:
        """`dst = expr;`, then a return of the arithmetic error when the expression calls a checked
        helper (a bare name or constant cannot fail)."""
        c = self.expr(expr, num_sms)
        out = [f"    {dst} = {c};"]
        if BAD_VAR in c:
            out += ["    if (tkir_bad_flag != 0) {",
                    f"        return {self.p}_arithmetic_error(tkir_bad_flag);",
                    "    }"]
        return out

    def plan_function(self) -> str:
        p, L = self.p, self.launch
        args = ", ".join([f"struct {p}_plan *tkir_plan"] + self.tensor_args() + self.size_args()
                         + ["int64_t tkir_num_sms"])
        out = [
            f"static const char *{p}_arithmetic_error(int bad)",
            "{",
            f"    return bad == {self.P}_DIV_ZERO ? {self.msg('division by zero in a size expression')}",
            f"        : {self.msg('the size arithmetic overflows int64_t (sizes too large)')};",
            "}",
            "",
            "/* The checks of tkir.backend.runtime.bind, in its order; NULL when the launch may go ahead. */",
            f"static const char *{p}_plan({args})",
            "{",
            "    int tkir_bad_flag = 0;",
            f"    int *{BAD_VAR} = &tkir_bad_flag;",
            "    int64_t tkir_v;",
        ]
        for t in self.tensors:
            if self._needs_bytes(t):
                out.append(f"    int64_t {self._bytes_local(t)};  /* {_comment(t.name)}: its size in bytes */")
        used = [f"(void){self.cname[t.name]};" for t in self.tensors]
        out.append("    " + " ".join(used + ["(void)tkir_v;", "(void)tkir_num_sms;", f"(void){BAD_VAR};"]))
        for s in self.sizes:
            c = self.cname[s]
            out += [f"    if ({c} < 0) {{", f"        return {self.msg(f'size {s} is negative')};", "    }"]
        for r in L.requires:
            out += self._eval("tkir_v", r.expr)
            why = f"{r.why if r.why is not None else 'requirement failed'} ({r.expr} must be {r.equals})"
            out += [f"    if (tkir_v != {_int64(r.equals)}) {{", f"        return {self.msg(why)};", "    }"]
        out += self.memory_checks()
        out += self.overlap_checks()
        limits = runtime.MAX_GRID
        for axis, g in enumerate(L.grid):
            out += self._eval("tkir_v", g, num_sms="tkir_num_sms")
            out += [f"    if (tkir_v < 1 || tkir_v > {_int64(limits[axis])}) {{",
                    f"        return {self.msg(f'grid dim {axis} = {g} is outside 1..{limits[axis]}')};",
                    "    }",
                    f"    tkir_plan->grid[{axis}] = (unsigned int)tkir_v;"]
        for i, t in enumerate(L.tma):
            out += self.tma_checks(i, t)
        for i, prm in enumerate(L.params):
            if isinstance(prm, SizeParam):
                lo, hi = SCALAR_RANGES[prm.dtype]
                out += self._eval("tkir_v", prm.size)
                why = f"size {prm.size} does not fit the {prm.dtype} parameter {prm.name!r}"
                out += [f"    if (tkir_v < {_int64(lo)} || tkir_v > {_int64(hi)}) {{",
                        f"        return {self.msg(why)};",
                        "    }",
                        f"    tkir_plan->param{i} = ({C_SCALAR_TYPES[prm.dtype]})tkir_v;"]
        out += ["    return NULL;", "}", ""]
        return "\n".join(out)

    def memory_checks(self) -> list[str]:
        """runtime._check_memory for pointers the caller promises are C-contiguous device memory: element
        alignment, and for tensors behind a tensor map a 16-byte aligned base and 16-byte row strides;
        on the way, each tensor's size in bytes (the tensor maps' reach is checked against it)."""
        out: list[str] = []
        for t in self.tensors:
            name, c = t.name, self.cname[t.name]
            itemsize = DTYPE_BYTES[t.dtype]
            tma = name in self.tma_tensors
            if itemsize > 1:
                why = f"argument {name!r} is not aligned to its {itemsize}-byte elements"
                out += [f"    if ({c} % {itemsize} != 0) {{", f"        return {self.msg(why)};", "    }"]
            if tma:
                why = f"argument {name!r} is read by TMA, which needs a {runtime.TMA_ALIGN}-byte aligned address"
                out += [f"    if ({c} % {runtime.TMA_ALIGN} != 0) {{", f"        return {self.msg(why)};", "    }"]
            elif name in self.aligned:  # runtime._check_memory's `aligned` check
                a = self.aligned[name]
                why = f"argument {name!r} is {a.why}, which needs a {a.bytes}-byte aligned address"
                out += [f"    if ({c} % {int(a.bytes)} != 0) {{", f"        return {self.msg(why)};", "    }"]
            if not self._needs_bytes(t):
                continue
            # C-contiguous: the byte stride of dim i is itemsize x the dims after it; after the loop,
            # the product is the tensor's size in bytes
            local = self._bytes_local(t)
            out.append(f"    {local} = INT64_C({itemsize});")
            dims = list(t.dims)
            for i in reversed(range(len(dims))):
                out += self._eval("tkir_v", dims[i])
                if tma and i < len(dims) - 1:
                    why = (f"argument {name!r} is read by TMA, which needs row strides that are multiples of "
                           f"{runtime.TMA_ALIGN} bytes")
                    out += [f"    if (tkir_v != 1 && {local} % {runtime.TMA_ALIGN} != 0) {{",
                            f"        return {self.msg(why)};",
                            "    }"]
                out += [f"    {local} = {self.p}_mul({local}, tkir_v, {BAD_VAR});",
                        "    if (tkir_bad_flag != 0) {",
                        f"        return {self.p}_arithmetic_error(tkir_bad_flag);",
                        "    }"]
        return out

    def _needs_bytes(self, t: TensorArg) -> bool:
        return t.name in self.tma_tensors or bool(self.readonly)

    def overlap_checks(self) -> list[str]:
        """runtime._check_readonly_overlap: a tensor read through ld.global.nc shares no byte with any
        tensor that is not read-only (the sizes in bytes are memory_checks'). Null pointers are not
        compared: a check made with sizes only, before any memory exists, passes."""
        out: list[str] = []
        for r in self.readonly:
            tr = next(x for x in self.tensors if x.name == r)
            for t in self.tensors:
                if t.name in self.readonly:
                    continue
                a, b = self.cname[r], self.cname[t.name]
                na, nb = self._bytes_local(tr), self._bytes_local(t)
                why = (f"argument {t.name!r} overlaps {r!r}, which the kernel only reads, through the read-only "
                       "data path (ld.global.nc): pass tensors that do not share memory")
                cond = (f"{a} != 0 && {b} != 0 && {na} > 0 && {nb} > 0 && {a} < {b} + (CUdeviceptr){nb} && "
                        f"{b} < {a} + (CUdeviceptr){na}")
                out += [f"    if ({cond}) {{",
                        f"        return {self.msg(why)};",
                        "    }"]
        return out

    def _bytes_local(self, t: TensorArg) -> str:
        return f"tkir_bytes{[x.name for x in self.tensors].index(t.name)}"

    def tma_checks(self, i: int, t: TmaSpec) -> list[str]:
        """runtime._tma_args: dims in 1..2^32, byte strides positive multiples of 16 below 2^40, and
        the map's reach within the tensor."""
        tensor = next(x for x in self.tensors if x.name == t.tensor)
        what = f"tensor map {t.param!r} of argument {t.tensor!r}"
        out: list[str] = []
        for j, d in enumerate(t.dims):
            out += self._eval("tkir_v", d)
            out += [f"    if (tkir_v < 1 || tkir_v > {_int64(runtime.TMA_MAX_DIM)}) {{",
                    f"        return {self.msg(f'{what}: dim {j} = {d} must be 1..2^32')};",
                    "    }",
                    f"    tkir_plan->tma{i}_dims[{j}] = (cuuint64_t)tkir_v;"]
        for j, st in enumerate(t.strides):
            out += self._eval("tkir_v", st)
            why = f"{what}: byte stride {j} = {st} must be a positive multiple of 16 below 2^40"
            out += [f"    if (tkir_v <= 0 || tkir_v >= {_int64(runtime.TMA_MAX_STRIDE)} || "
                    f"tkir_v % {runtime.TMA_ALIGN} != 0) {{",
                    f"        return {self.msg(why)};",
                    "    }",
                    f"    tkir_plan->tma{i}_strides[{j}] = (cuuint64_t)tkir_v;"]
        if len(t.strides) == 0:
            out.append(f"    tkir_plan->tma{i}_strides[0] = 0;  /* unused: a rank-1 map has no strides */")
        itemsize = DTYPE_BYTES[t.dtype]
        p = self.p
        reach = f"{p}_mul(INT64_C({itemsize}), (int64_t)tkir_plan->tma{i}_dims[0], {BAD_VAR})"
        for j in range(1, len(t.dims)):
            reach = (f"{p}_add({reach}, {p}_mul((int64_t)tkir_plan->tma{i}_dims[{j}] - 1, "
                     f"(int64_t)tkir_plan->tma{i}_strides[{j - 1}], {BAD_VAR}), {BAD_VAR})")
        out += [f"    tkir_v = {reach};",
                "    if (tkir_bad_flag != 0) {",
                f"        return {p}_arithmetic_error(tkir_bad_flag);",
                "    }",
                f"    if (tkir_v > {self._bytes_local(tensor)}) {{",
                f"        return {self.msg(f'{what}: the map spans more bytes than the tensor holds')};",
                "    }"]
        return out

    def check_function(self) -> str:
        p, P = self.p, self.P
        args = ", ".join(["&tkir_plan"] + [self.cname[t.name] for t in self.tensors]
                         + [self.cname[s] for s in self.sizes]
                         + [f"{p}_num_sms != 0 ? {p}_num_sms : {P}_DEFAULT_NUM_SMS"])
        return f"""const char *{p}_check({self.check_args()})
{{
    struct {p}_plan tkir_plan;
    return {p}_plan({args});
}}
"""

    def load_function(self) -> str:
        p, P, L = self.p, self.P, self.launch
        smem, threads = L.dynamic_smem, math.prod(L.block)
        body = [
            f"CUresult {p}_load(void)",
            "{",
            "    CUresult tkir_err;",
            "    CUdevice tkir_device;",
            "    CUmodule tkir_module;",
            "    CUfunction tkir_function;",
            "    int tkir_sms;",
            "    int tkir_value;",
            f"    if ({p}_function != NULL) {{",
            "        return CUDA_SUCCESS;",
            "    }",
            "    tkir_err = cuCtxGetDevice(&tkir_device);",
            "    if (tkir_err != CUDA_SUCCESS) {",
            "        return tkir_err;",
            "    }",
            "    tkir_err = cuDeviceGetAttribute(&tkir_sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, tkir_device);",
            "    if (tkir_err != CUDA_SUCCESS) {",
            "        return tkir_err;",
            "    }",
        ]
        if smem > runtime.STATIC_SMEM_LIMIT:
            body += [
                "    tkir_err = cuDeviceGetAttribute(&tkir_value, "
                "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, tkir_device);",
                "    if (tkir_err != CUDA_SUCCESS) {",
                "        return tkir_err;",
                "    }",
                f"    if (tkir_value < {P}_DYNAMIC_SMEM) {{",
                "        return CUDA_ERROR_INVALID_VALUE;  /* the device allows less shared memory per block */",
                "    }",
            ]
        body += [
            f"    tkir_err = cuModuleLoadData(&tkir_module, {p}_ptx);",
            "    if (tkir_err != CUDA_SUCCESS) {",
            "        return tkir_err;",
            "    }",
            f"    tkir_err = cuModuleGetFunction(&tkir_function, tkir_module, {P}_KERNEL);",
            "    if (tkir_err != CUDA_SUCCESS) {",
            "        goto fail;",
            "    }",
        ]
        if smem > runtime.STATIC_SMEM_LIMIT:
            body += [
                "    tkir_err = cuFuncSetAttribute(tkir_function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, "
                f"{P}_DYNAMIC_SMEM);",
                "    if (tkir_err != CUDA_SUCCESS) {",
                "        goto fail;",
                "    }",
            ]
        body += [
            "    tkir_err = cuFuncGetAttribute(&tkir_value, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, tkir_function);",
            "    if (tkir_err != CUDA_SUCCESS) {",
            "        goto fail;",
            "    }",
            f"    if (tkir_value < {threads}) {{",
            "        tkir_err = CUDA_ERROR_INVALID_VALUE;  /* register use leaves fewer threads per block */",
            "        goto fail;",
            "    }",
        ]
        for i, w in enumerate(self.workspaces):
            nbytes = " * ".join(["(size_t)tkir_sms" if d == "NUM_SMS" else f"(size_t){int(d)}" for d in w.dims]
                                + [f"(size_t){DTYPE_BYTES[w.dtype]}"])
            body += [
                f"    tkir_err = cuMemAlloc(&{p}_workspace{i}, {nbytes});",
                "    if (tkir_err != CUDA_SUCCESS) {",
                "        goto fail;",
                "    }",
                f"    tkir_err = cuMemsetD8({p}_workspace{i}, 0, {nbytes});",
                "    if (tkir_err != CUDA_SUCCESS) {",
                "        goto fail;",
                "    }",
            ]
        if self.workspaces:
            body += ["    tkir_err = cuCtxSynchronize();",
                     "    if (tkir_err != CUDA_SUCCESS) {",
                     "        goto fail;",
                     "    }"]
        body += [f"    {p}_module = tkir_module;",
                 f"    {p}_function = tkir_function;",
                 f"    {p}_num_sms = tkir_sms;"]
        if self.counts:
            body.append(f"    {p}_launches = 0;")
        body += ["    return CUDA_SUCCESS;", "fail:"]
        for i in range(len(self.workspaces)):
            body += [f"    if ({p}_workspace{i} != 0) {{",
                     f"        (void)cuMemFree({p}_workspace{i});",
                     f"        {p}_workspace{i} = 0;",
                     "    }"]
        body += ["    (void)cuModuleUnload(tkir_module);", "    return tkir_err;", "}", ""]
        return "\n".join(body)

    def unload_function(self) -> str:
        p = self.p
        body = [f"CUresult {p}_unload(void)",
                "{",
                "    CUresult tkir_err = CUDA_SUCCESS;",
                "    CUresult tkir_free_err;",
                f"    if ({p}_function == NULL) {{",
                "        return CUDA_SUCCESS;",
                "    }",
                "    (void)tkir_free_err;"]
        for i in range(len(self.workspaces)):
            body += [f"    tkir_free_err = cuMemFree({p}_workspace{i});",
                     "    if (tkir_err == CUDA_SUCCESS) {",
                     "        tkir_err = tkir_free_err;",
                     "    }",
                     f"    {p}_workspace{i} = 0;"]
        body += [f"    tkir_free_err = cuModuleUnload({p}_module);",
                 "    if (tkir_err == CUDA_SUCCESS) {",
                 "        tkir_err = tkir_free_err;",
                 "    }",
                 f"    {p}_module = NULL;",
                 f"    {p}_function = NULL;",
                 f"    {p}_num_sms = 0;",
                 "    return tkir_err;",
                 "}",
                 ""]
        return "\n".join(body)

    def launch_function(self) -> str:
        p, P, L = self.p, self.P, self.launch
        out: list[str] = []
        for i, t in enumerate(L.tma):
            rank = len(t.dims)
            box = ", ".join(str(int(b)) for b in t.box)
            elem = ", ".join(str(int(e)) for e in t.elem_strides)
            out.append(f"static const cuuint32_t {p}_box{i}[{rank}] = {{{box}}};")
            out.append(f"static const cuuint32_t {p}_elem_strides{i}[{rank}] = {{{elem}}};")
        if L.tma:
            out.append("")
        params = L.params
        out += [f"CUresult {p}_launch({self.launch_args()})",
                "{",
                f"    struct {p}_plan tkir_plan;"]
        for i in range(len(L.tma)):
            out.append(f"    {P}_ALIGN128 CUtensorMap tkir_map{i};")
        if self.counts:
            out.append("    int32_t tkir_count;")
        if params:
            out.append(f"    void *tkir_params[{len(params)}];")
        call = ", ".join(["&tkir_plan"] + [self.cname[t.name] for t in self.tensors]
                         + [self.cname[s] for s in self.sizes] + [f"{p}_num_sms"])
        out += ["    CUresult tkir_err;",
                f"    if ({p}_function == NULL) {{",
                f"        tkir_err = {p}_load();",
                "        if (tkir_err != CUDA_SUCCESS) {",
                "            return tkir_err;",
                "        }",
                "    }",
                f"    if ({p}_plan({call}) != NULL) {{",
                f"        return CUDA_ERROR_INVALID_VALUE;  /* {p}_check says why */",
                "    }"]
        for i, t in enumerate(L.tma):
            enums = [runtime.TMA_DTYPES[t.dtype].name, runtime.TMA_INTERLEAVE_NONE.name,
                     runtime.TMA_SWIZZLES[t.swizzle].name, runtime.TMA_L2_PROMOTIONS[t.l2_promotion].name,
                     runtime.TMA_OOB_FILLS[t.oob_fill].name]
            out += [f"    /* {_comment(t.param)}: {_comment(t.tensor)}, box {list(t.box)}, "
                    f"swizzle {t.swizzle} */",
                    f"    tkir_err = cuTensorMapEncodeTiled(&tkir_map{i}, {enums[0]}, {len(t.dims)}, "
                    f"(void *)(uintptr_t){self.cname[t.tensor]},",
                    f"                                      tkir_plan.tma{i}_dims, tkir_plan.tma{i}_strides, "
                    f"{p}_box{i}, {p}_elem_strides{i},",
                    f"                                      {enums[1]}, {enums[2]},",
                    f"                                      {enums[3]}, {enums[4]});",
                    "    if (tkir_err != CUDA_SUCCESS) {",
                    "        return tkir_err;",
                    "    }"]
        if self.counts:
            out.append(f"    tkir_count = ++{p}_launches;")
        workspace = 0
        for i, prm in enumerate(params):
            if isinstance(prm, TensorMapParam):
                value = f"&tkir_map{prm.tma}"
            elif isinstance(prm, PointerParam):
                value = f"&{self.cname[prm.tensor]}"
            elif isinstance(prm, WorkspaceParam):
                value, workspace = f"&{p}_workspace{workspace}", workspace + 1
            elif isinstance(prm, LaunchCountParam):
                value = "&tkir_count"
            elif isinstance(prm, SizeParam):
                value = f"&tkir_plan.param{i}"
            else:
                value = f"&{self.cname[prm.scalar]}"
            out.append(f"    tkir_params[{i}] = {value};  /* {_comment(prm.name)} ({prm.kind}) */")
        bx, by, bz = L.block
        out += [f"    return cuLaunchKernel({p}_function, tkir_plan.grid[0], tkir_plan.grid[1], tkir_plan.grid[2],",
                f"                          {bx}, {by}, {bz}, {P}_DYNAMIC_SMEM, stream, "
                f"{'tkir_params' if params else 'NULL'}, NULL);",
                "}",
                ""]
        return "\n".join(out)


def _unique_ident(name: str, taken: set[str]) -> str:
    out = name
    while out in C_RESERVED or out.startswith(_RESERVED_PREFIXES) or re.match(r"cu[A-Z]", out) or out in taken:
        out += "_"
    taken.add(out)
    return out


def _int64(value: int) -> str:
    return f"INT64_C({value})" if value >= 0 else f"(-INT64_C({-value - 1}) - 1)"


def _c_string(text: str) -> str:
    """A C string literal of `text`: quotes and backslashes escaped, '?' too (no trigraphs), anything
    outside printable ASCII as octal escapes of its UTF-8 bytes."""
    out = []
    for b in text.encode("utf-8"):
        ch = chr(b)
        if ch in '"\\?':
            out.append("\\" + ch)
        elif 0x20 <= b < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def _comment(text: str) -> str:
    """Text safe inside a /* */ comment (and on one line)."""
    return " ".join(text.replace("*/", "* /").replace("/*", "/ *").split())


def _ptx_directive(ptx: str, name: str) -> str:
    m = re.search(rf"^\s*\.{name}\s+([^\s/]+)", ptx, re.MULTILINE)
    return m.group(1) if m else "?"
