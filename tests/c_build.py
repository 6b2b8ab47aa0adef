"""Building and running C in the `--emit c` tests: the C compiler, cuda.h, and the libcuda the Python
runtime loads. A missing compiler or header is a test failure naming what to install, never a skip
(tests/conftest.py: GPU tests skip only where no GPU exists).
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from limits import HANG_S  # tests/ is on sys.path under pytest

from tkir.backend import toolchain
from tkir.backend.launch import LaunchDescription

COMPILE_TIMEOUT_S = HANG_S
RUN_TIMEOUT_S = HANG_S
C_COMPILERS = ("cc", "gcc", "clang")


def c_compiler() -> str:
    """$CC, else the first of cc, gcc, clang on $PATH (then /usr/bin)."""
    if os.environ.get("CC"):
        found = shutil.which(os.environ["CC"].split()[0])
        if found:
            return found
        pytest.fail(f"$CC is {os.environ['CC']!r}, which is not on $PATH")
    for name in C_COMPILERS:
        found = shutil.which(name) or shutil.which(name, path="/usr/bin:/usr/local/bin")
        if found:
            return found
    pytest.fail("no C compiler: none of $CC, cc, gcc, clang is on $PATH (the --emit c tests compile the "
                "generated C; install gcc or clang)")


def cuda_include() -> Path:
    """The folder with cuda.h (tkir.backend.toolchain.cuda_include_dir)."""
    try:
        return toolchain.cuda_include_dir()
    except toolchain.ToolchainError as e:
        pytest.fail(str(e))


def run_cc(args: list[str], cwd: Path) -> None:
    """Run the C compiler; its output is the failure message when it fails."""
    cmd = [c_compiler(), *args]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}"[:20000])


def ubsan_flags(cwd: Path) -> list[str]:
    """-fsanitize=undefined when this compiler can link it (GCC and Clang on Linux), else nothing."""
    probe = cwd / "ubsan_probe.c"
    probe.write_text("int main(void) { return 0; }\n")
    flags = ["-fsanitize=undefined", "-fno-sanitize-recover=undefined"]
    proc = subprocess.run([c_compiler(), *flags, str(probe), "-o", str(cwd / "ubsan_probe")], cwd=cwd,
                          capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    return flags if proc.returncode == 0 else []


def libcuda() -> Path:
    """The driver library the Python runtime loads (ctypes.CDLL("libcuda.so.1")), as a file path, read
    back from /proc/self/maps: linking a C program against exactly this file works wherever the
    driver lives, with or without the toolkit's libcuda.so development link."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        pytest.fail(f"cannot load libcuda.so.1, the CUDA driver library: {e}")
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 6 and re.search(r"/libcuda\.so(\.\d+)*$", fields[-1]):
            return Path(fields[-1])
    pytest.fail("libcuda.so.1 is loaded but /proc/self/maps does not name its file")


def size_names(launch: LaunchDescription) -> list[str]:
    """The named sizes of a launch description's tensors, in first-use order (the C entry points'
    size arguments)."""
    out: list[str] = []
    for t in launch.tensors:
        out += [d for d in t.dims if isinstance(d, str) and d.isidentifier() and d not in out]
    return out
