"""Which CPU instructions a llama-server build may use, and whether this CPU has them. Standard library only.

ggml's default build is ``-march=native``: it uses every instruction the compiler sees on the build machine,
AMX included. On a virtual machine that advertises AMX without the kernel granting it (seen on the 2-core
x86-64 machines this project runs on) the first matrix multiply dies with SIGSEGV, and a data folder copied
to an older CPU dies with SIGILL. So mm never builds natively: it turns ggml's instruction-set options on one
by one, each only where ``/proc/cpuinfo`` lists every flag it needs, records those flags next to the binary,
and checks them before every start.

Two plans:
- ``tuned``: everything this CPU has up to AVX-512 (F/CD/BW/DQ/VL, VBMI, VNNI, BF16) and AVX-VNNI. Never AMX:
  ggml's AMX path needs the kernel's permission for tile data, which virtual machines often lack.
- ``portable``: x86-64-v3 (AVX, AVX2, FMA, F16C, BMI2) where the CPU has it, else SSE4.2, else the
  compiler's baseline. Every x86-64 CPU since 2013–2015 runs the v3 plan.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable
from pathlib import Path

import msgspec

# ggml's CMake option → the /proc/cpuinfo flags the compiler flags it adds need (GCC/Clang, x86).
X86_OPTIONS: dict[str, tuple[str, ...]] = {
    "SSE42": ("sse4_2",),
    "AVX": ("avx",),
    "AVX2": ("avx2",),
    "FMA": ("fma",),
    "F16C": ("f16c",),
    "BMI2": ("bmi2",),
    "AVX_VNNI": ("avx_vnni",),
    "AVX512": ("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"),
    "AVX512_VBMI": ("avx512vbmi",),
    "AVX512_VNNI": ("avx512_vnni",),
    "AVX512_BF16": ("avx512_bf16",),
}
# x86-64-v3, the portable plan where the CPU has all of it.
V3 = ("SSE42", "AVX", "AVX2", "FMA", "F16C", "BMI2")
# Options never turned on, whatever the CPU says (see the module's docstring).
NEVER = ("AMX_TILE", "AMX_INT8", "AMX_BF16")


class Plan(msgspec.Struct, frozen=True):
    """What to build with: the variant's name, its CMake flags, and the CPU flags the binary will need."""

    variant: str  # "tuned" or "portable"
    cmake_flags: tuple[str, ...]
    needs: tuple[str, ...]  # /proc/cpuinfo flags; empty where they cannot be checked (not x86)

    def describe(self) -> str:
        on = [f.removeprefix("-DGGML_").removesuffix("=ON") for f in self.cmake_flags if f.endswith("=ON")]
        return (
            f"{self.variant} ({', '.join(on) if on else 'the compiler baseline'}; no AMX, not -march=native)"
        )


def is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The flags of the first processor in /proc/cpuinfo (empty where there is none to read)."""
    try:
        with open(cpuinfo, errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def plan(variant: str, flags: Iterable[str] | None = None, *, x86: bool | None = None) -> Plan:
    """The build plan *variant* ("tuned" or "portable") for a CPU with *flags* (default: this one)."""
    if variant not in ("tuned", "portable"):
        raise ValueError(f"unknown build variant {variant!r}")
    have = frozenset(cpu_flags() if flags is None else flags)
    if not (is_x86() if x86 is None else x86):
        # Elsewhere ggml's own baseline for the architecture (armv8-a on aarch64): never native.
        return Plan(variant, ("-DGGML_NATIVE=OFF",), ())
    if variant == "tuned":
        chosen = [opt for opt, need in X86_OPTIONS.items() if have.issuperset(need)]
    elif have.issuperset(f for opt in V3 for f in X86_OPTIONS[opt]):
        chosen = list(V3)
    else:
        chosen = ["SSE42"] if have.issuperset(X86_OPTIONS["SSE42"]) else []
    cmake = ["-DGGML_NATIVE=OFF"]
    cmake += [f"-DGGML_{opt}={'ON' if opt in chosen else 'OFF'}" for opt in X86_OPTIONS]
    cmake += [f"-DGGML_{opt}=OFF" for opt in NEVER]
    needs = sorted({f for opt in chosen for f in X86_OPTIONS[opt]})
    return Plan(variant, tuple(cmake), tuple(needs))


def missing(needs: Iterable[str], flags: Iterable[str] | None = None) -> list[str]:
    """The flags of *needs* this CPU (or *flags*) lacks; none where the CPU's flags cannot be read."""
    have = frozenset(cpu_flags() if flags is None else flags)
    if not have:
        return []
    return sorted(set(needs) - have)
