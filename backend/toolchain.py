"""The NVIDIA command-line tools the backend drives: ptxas (PTX -> cubin), nvdisasm / cuobjdump (SASS).

    cubin = assemble(ptx, "sm_90a")          # Assembled: .cubin, .log, .registers, .spill_stores, ...
    sass = disassemble(cubin.cubin)
    sass_has(sass, "HGMMA"); local_memory_ops(sass)

Tools come from the pip wheels first (`nvidia-cuda-nvcc` ships ptxas, `nvidia-cuda-nvdisasm` nvdisasm,
`nvidia-cuda-cuobjdump` cuobjdump, under `site-packages/nvidia/cu13/bin` or, in older wheels,
`nvidia/cuda_nvcc/bin`), then `$PATH`, then `/usr/local/cuda/bin`, so the version the test
environment pins is the one used.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from tkir.diagnostics import TkirError

# The pip package that ships each tool, named in the error when the tool is missing.
TOOL_PACKAGES = {
    "ptxas": "nvidia-cuda-nvcc",
    "nvdisasm": "nvidia-cuda-nvdisasm",
    "cuobjdump": "nvidia-cuda-cuobjdump",
}
# Folders under the `nvidia` namespace package where the wheels put their executables.
_WHEEL_BIN_DIRS = ("cu13/bin", "cu12/bin", "cuda_nvcc/bin", "cuda_nvdisasm/bin", "cuda_cuobjdump/bin")
# ... and their headers: cuda.h comes with nvidia-cuda-runtime (a dependency of nvidia-cuda-nvcc).
_WHEEL_INCLUDE_DIRS = ("cu13/include", "cu12/include", "cuda_runtime/include")
_CUDA_HOME_BIN = Path("/usr/local/cuda/bin")
_CUDA_ROOT_GLOB = "/usr/local/cuda*"  # /usr/local/cuda, /usr/local/cuda-13.0, ...
TOOL_TIMEOUT_S = 120  # ptxas on a large warp-specialized kernel takes seconds; minutes means it hangs
ELF_MAGIC = b"\x7fELF"
# ptxas results `assemble` keeps per process (a cubin is 10-300 KB: a few tens of MB at most)
ASSEMBLED_KEPT = 64


class ToolchainError(TkirError, RuntimeError):
    """A tool is missing or failed; the message carries the tool's own output."""


@dataclass
class Assembled:
    """A cubin and what `ptxas -v` said about it (the largest value over the module's kernels)."""

    cubin: bytes = field(repr=False)
    log: str = field(repr=False)
    registers: int = 0
    shared_bytes: int = 0
    stack_frame: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    warnings: list[str] = field(default_factory=list)


@functools.cache
def find_tool(name: str) -> str:
    """The path of `name` (ptxas, nvdisasm, cuobjdump): pip wheels, then $PATH, then /usr/local/cuda/bin."""
    for folder in _wheel_bin_folders():
        candidate = folder / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    on_path = shutil.which(name)
    if on_path:
        return on_path
    candidate = _CUDA_HOME_BIN / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    package = TOOL_PACKAGES.get(name, "the CUDA toolkit")
    raise ToolchainError(f"{name} not found (looked in the nvidia pip wheels, $PATH and {_CUDA_HOME_BIN}); "
                         f"install it with `pip install {package}`")


@functools.cache
def ptxas_version() -> str:
    """ptxas's version line, e.g. 'Cuda compilation tools, release 13.0, V13.0.88' (part of cache keys)."""
    out = _run([find_tool("ptxas"), "--version"], "ptxas --version").stdout
    lines = [line for line in out.splitlines() if "release" in line]
    return lines[-1].strip() if lines else out.strip()


def assemble(ptx: str, arch: str = "sm_90a", extra: list[str] | tuple[str, ...] = ()) -> Assembled:
    """Assemble PTX text into a cubin with `ptxas -v -arch=<arch>`; ToolchainError carries ptxas's errors.
    The last ASSEMBLED_KEPT results are kept per process, keyed by the ptxas binary, the PTX text, the arch and
    the options (a kernel compiled again in one process, tkc tune's repeated candidates or a test's fixtures,
    reuses its cubin and report); each call gets its own copy of the report. A failure is never kept."""
    res = _assemble_kept(find_tool("ptxas"), ptx, arch, tuple(extra))
    return replace(res, warnings=list(res.warnings))


@functools.lru_cache(maxsize=ASSEMBLED_KEPT)
def _assemble_kept(ptxas: str, ptx: str, arch: str, extra: tuple[str, ...]) -> Assembled:
    with tempfile.TemporaryDirectory(prefix="tkir-ptxas-") as tmp:
        src, dst = Path(tmp) / "kernel.ptx", Path(tmp) / "kernel.cubin"
        src.write_text(ptx, encoding="utf-8")
        proc = _run([ptxas, "-v", f"-arch={arch}", *extra, str(src), "-o", str(dst)], "ptxas",
                    check=False)
        log = proc.stdout + proc.stderr
        if proc.returncode != 0 or not dst.exists():
            raise ToolchainError(f"ptxas failed for {arch}:\n{_error_lines(log)}")
        cubin = dst.read_bytes()
    return _parse_resources(cubin, log)


def disassemble(cubin: bytes) -> str:
    """SASS text of a cubin: nvdisasm, or `cuobjdump --dump-sass` where nvdisasm is absent."""
    if not cubin.startswith(ELF_MAGIC):
        raise ToolchainError("disassemble() wants a cubin (an ELF file); got something else")
    with tempfile.TemporaryDirectory(prefix="tkir-sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        try:
            tool = [find_tool("nvdisasm"), "-c"]
        except ToolchainError:
            tool = [find_tool("cuobjdump"), "--dump-sass"]
        return _run([*tool, str(path)], Path(tool[0]).name).stdout


def sass_has(sass: str, opcode: str) -> bool:
    """Whether an instruction with this opcode occurs (any modifiers: HGMMA matches HGMMA.64x256x16.F32)."""
    return any(_opcode(line) == opcode for line in sass.splitlines())


def sass_count(sass: str, opcode: str) -> int:
    """How many instructions with this opcode the SASS holds."""
    return sum(_opcode(line) == opcode for line in sass.splitlines())


def sass_instructions(sass: str) -> list[tuple[str, str, str]]:
    """Every instruction of a SASS listing in order, as (code address, guard predicate or "", the instruction
    without its guard or the closing `;`): `/*0130*/ @!P0 BRA `(.L_x_6) ;` -> ("0130", "@!P0", "BRA `(.L_x_6)")."""
    return [(m.group(1), m.group(2) or "", m.group(3)) for m in map(_SASS_INSTR.match, sass.splitlines()) if m]


def local_memory_ops(sass: str) -> list[str]:
    """The local-memory loads and stores (LDL/STL: register spills or stack arrays), as SASS lines."""
    return [line.strip() for line in sass.splitlines() if _opcode(line) in ("LDL", "STL")]


# --- helpers -------------------------------------------------------------------------------------

# A SASS instruction line: `/*0070*/  @!P0 EXIT ;` -> group 1 is the mnemonic with modifiers.
_SASS_LINE = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+(?:@!?U?P[T0-9]+\s+)?"
                        r"([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")
_SASS_INSTR = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/\s+(?:(@!?U?P[T0-9]+)\s+)?(.*?)\s*;")
_REGISTERS = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def _opcode(line: str) -> str | None:
    m = _SASS_LINE.match(line)
    return m.group(1).split(".")[0] if m else None


def cuda_include_dir() -> Path:
    """The folder holding the CUDA driver API header cuda.h (what `--emit c` output is compiled
    against): $CUDA_HOME/include or $CUDA_PATH/include, then the NVIDIA pip wheels, then beside
    `nvcc` on $PATH, then /usr/local/cuda/include and /usr/local/cuda-*/include (newest first)."""
    candidates = [Path(os.environ[v]) / "include" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    candidates += [Path(p) for p in _wheel_folders(_WHEEL_INCLUDE_DIRS)]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(Path(nvcc).resolve().parent.parent / "include")
    roots = sorted(Path("/").glob(_CUDA_ROOT_GLOB.lstrip("/")), key=_version_key, reverse=True)
    candidates += [r / "include" for r in roots]
    for folder in candidates:
        if (folder / "cuda.h").is_file():
            return folder
    raise ToolchainError("cuda.h not found (looked in $CUDA_HOME, $CUDA_PATH, the nvidia pip wheels, beside nvcc "
                         f"and {_CUDA_ROOT_GLOB}/include); install the CUDA toolkit or `pip install "
                         "nvidia-cuda-runtime`, or set CUDA_HOME")


def _version_key(path: Path) -> tuple[int, ...]:
    """/usr/local/cuda-12.4 -> (12, 4); /usr/local/cuda (the symlink to the default) sorts first."""
    digits = re.findall(r"\d+", path.name)
    return tuple(int(d) for d in digits) if digits else (1 << 30,)


def _wheel_folders(subdirs: tuple[str, ...]) -> list[Path]:
    try:
        import nvidia  # namespace package of the NVIDIA pip wheels
    except ImportError:
        return []
    roots = [Path(p) for p in getattr(nvidia, "__path__", [])]
    return [root / sub for root in roots for sub in subdirs]


def _wheel_bin_folders() -> list[Path]:
    return _wheel_folders(_WHEEL_BIN_DIRS)


def _run(cmd: list[str], what: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ToolchainError(f"{what} ran longer than {TOOL_TIMEOUT_S} s and was stopped") from None
    except OSError as e:
        raise ToolchainError(f"{what} could not be started: {e}") from None
    if check and proc.returncode != 0:
        raise ToolchainError(f"{what} failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}".rstrip())
    return proc


def _error_lines(log: str) -> str:
    """ptxas's error lines first (they name the PTX line); the whole log if it flagged none."""
    errors = [line for line in log.splitlines() if "error" in line.lower() or "fatal" in line.lower()]
    return "\n".join(errors) if errors else log.strip()


def _parse_resources(cubin: bytes, log: str) -> Assembled:
    out = Assembled(cubin=cubin, log=log)
    for line in log.splitlines():
        if m := _REGISTERS.search(line):
            out.registers = max(out.registers, int(m.group(1)))
        if m := _SMEM.search(line):
            out.shared_bytes = max(out.shared_bytes, int(m.group(1)))
        if m := _FRAME.search(line):
            out.stack_frame = max(out.stack_frame, int(m.group(1)))
            out.spill_stores = max(out.spill_stores, int(m.group(2)))
            out.spill_loads = max(out.spill_loads, int(m.group(3)))
        if "warning" in line.lower() or re.search(r"\(C\d{4}\)", line):
            out.warnings.append(line.strip())
    return out
