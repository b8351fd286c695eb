"""The instruction sets a llama-server build may use: never AMX, never native, only what the CPU lists."""

from __future__ import annotations

from pathlib import Path

from mmd.local import cpu

# The flags of the 2-core Xeon this project runs on (Sapphire Rapids under KVM), AMX included.
SAPPHIRE = frozenset(
    [
        "fpu",
        "sse",
        "sse2",
        "ssse3",
        "sse4_1",
        "sse4_2",
        "avx",
        "f16c",
        "fma",
        "bmi1",
        "bmi2",
        "avx2",
        "avx512f",
        "avx512dq",
        "avx512cd",
        "avx512bw",
        "avx512vl",
        "avx512ifma",
        "avx512vbmi",
        "avx512_vbmi2",
        "avx512_vnni",
        "avx512_bf16",
        "avx512_fp16",
        "avx_vnni",
        "amx_tile",
        "amx_int8",
        "amx_bf16",
    ]
)
HASWELL = frozenset(
    ["fpu", "sse", "sse2", "ssse3", "sse4_1", "sse4_2", "avx", "f16c", "fma", "bmi1", "bmi2", "avx2"]
)
NEHALEM = frozenset(["fpu", "sse", "sse2", "ssse3", "sse4_1", "sse4_2"])


def flags_on(plan: cpu.Plan) -> set[str]:
    return {f.removeprefix("-DGGML_").removesuffix("=ON") for f in plan.cmake_flags if f.endswith("=ON")}


def test_the_tuned_plan_takes_avx512_but_never_amx_nor_native() -> None:
    plan = cpu.plan("tuned", SAPPHIRE, x86=True)
    assert {"AVX2", "AVX512", "AVX512_VNNI", "AVX512_BF16", "AVX512_VBMI", "AVX_VNNI"} <= flags_on(plan)
    assert "-DGGML_NATIVE=OFF" in plan.cmake_flags
    for amx in ("AMX_TILE", "AMX_INT8", "AMX_BF16"):
        assert f"-DGGML_{amx}=OFF" in plan.cmake_flags
    assert not any("AMX" in f and f.endswith("=ON") for f in plan.cmake_flags)
    assert "avx512f" in plan.needs and not any(n.startswith("amx") for n in plan.needs)


def test_the_portable_plan_is_x86_64_v3_where_the_cpu_has_it() -> None:
    plan = cpu.plan("portable", SAPPHIRE, x86=True)
    assert flags_on(plan) == {"SSE42", "AVX", "AVX2", "FMA", "F16C", "BMI2"}
    assert not any(n.startswith("avx512") for n in plan.needs)
    assert cpu.missing(plan.needs, HASWELL) == []  # runs on a 2013 CPU


def test_an_older_cpu_gets_only_what_it_has() -> None:
    assert flags_on(cpu.plan("tuned", HASWELL, x86=True)) == {"SSE42", "AVX", "AVX2", "FMA", "F16C", "BMI2"}
    assert flags_on(cpu.plan("portable", NEHALEM, x86=True)) == {"SSE42"}
    assert flags_on(cpu.plan("portable", frozenset({"fpu"}), x86=True)) == set()


def test_avx512_needs_every_flag_of_its_group() -> None:
    partial = HASWELL | {"avx512f", "avx512cd"}  # no bw/dq/vl: ggml's -mavx512* would not all be legal
    assert "AVX512" not in flags_on(cpu.plan("tuned", partial, x86=True))


def test_a_build_for_this_cpu_lists_what_an_older_one_lacks() -> None:
    tuned = cpu.plan("tuned", SAPPHIRE, x86=True)
    lacking = cpu.missing(tuned.needs, HASWELL)
    assert "avx512f" in lacking and "avx2" not in lacking
    assert cpu.missing(tuned.needs, SAPPHIRE) == []


def test_elsewhere_the_architecture_baseline() -> None:
    plan = cpu.plan("tuned", frozenset({"neon", "asimd"}), x86=False)
    assert plan.cmake_flags == ("-DGGML_NATIVE=OFF",) and plan.needs == ()


def test_cpu_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse4_2 avx2\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert cpu.cpu_flags(info) == {"fpu", "sse4_2", "avx2"}
    assert cpu.cpu_flags(tmp_path / "absent") == frozenset()
    assert cpu.missing(["avx2"], frozenset()) == []  # unreadable: nothing can be said
