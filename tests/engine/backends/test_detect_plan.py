"""Detection and planning against stand-in nvcc / nvidia-smi / sysctl executables."""

from __future__ import annotations

import json
import os

import pytest

from engine.backends.detect import detect
from engine.backends.plan import make_plan
from tests.engine.backends.standins import env_with, nvcc, nvidia_smi, sysctl_apple
from tests.engine.cli_helpers import mtp_studio

GPUS = {
    "6.1": ("NVIDIA GeForce GTX 1080", "6.1", 8192),
    "8.6": ("NVIDIA GeForce RTX 3090", "8.6", 24576),
    "9.0": ("NVIDIA H100 80GB HBM3", "9.0", 81559),
    "12.0": ("NVIDIA GeForce RTX 5090", "12.0", 32607),
}

# toolkit -> compute capabilities it cannot target (see the arch table's reasoning)
CANNOT = {
    "12.4": {"12.0"},
    "12.7": {"12.0"},
    "12.8": set(),
    "12.9": set(),
    "13.0": {"6.1"},
}


@pytest.mark.parametrize("toolkit", sorted(CANNOT))
@pytest.mark.parametrize("cc", sorted(GPUS, key=float))
def test_each_gpu_under_each_toolkit(tmp_path, toolkit, cc):
    bin_dir = tmp_path / "bin"
    nvcc(bin_dir, toolkit)
    nvidia_smi(bin_dir, [GPUS[cc]])
    d = detect(env=env_with(bin_dir))
    assert d.toolkit.version == toolkit and d.toolkit.source == "PATH"
    assert [(g.name, g.compute_capability) for g in d.gpus] == [GPUS[cc][:2]]
    plan = make_plan(d)
    arch = cc.replace(".", "")
    if cc in CANNOT[toolkit]:
        assert plan.backend == "cpu" and plan.cuda_architectures == []
        assert any(f"CUDA {toolkit} cannot build for {GPUS[cc][0]}" in p for p in plan.problems)
        need = "CUDA 12.8 or newer" if cc == "12.0" else "a CUDA toolkit up to 12.x"
        assert any(need in p for p in plan.problems), plan.problems
    else:
        assert plan.backend == "cuda" and plan.problems == []
        assert plan.cuda_architectures == [arch]
        assert f"-DCMAKE_CUDA_ARCHITECTURES={arch}" in plan.cmake_args and "-DGGML_CUDA=on" in plan.cmake_args
        assert f"-DCMAKE_CUDA_COMPILER={bin_dir / 'nvcc'}" in plan.cmake_args


def test_mixed_gpus_keep_the_ones_the_toolkit_can_target(tmp_path):
    bin_dir = tmp_path / "bin"
    nvcc(bin_dir, "12.4")
    nvidia_smi(bin_dir, [GPUS["12.0"], GPUS["8.6"], GPUS["8.6"]])
    plan = make_plan(detect(env=env_with(bin_dir)))
    assert plan.backend == "cuda" and plan.cuda_architectures == ["86"]
    assert len(plan.problems) == 1 and "RTX 5090" in plan.problems[0]


def test_portable_adds_the_toolkit_defaults(tmp_path):
    bin_dir = tmp_path / "bin"
    nvcc(bin_dir, "12.8")
    nvidia_smi(bin_dir, [GPUS["8.6"]])
    plan = make_plan(detect(env=env_with(bin_dir)), portable=True)
    assert plan.cuda_architectures == ["61", "70", "75", "80", "86", "89", "90", "100", "120"]


def test_driver_only_is_a_labelled_fallback_not_a_build(tmp_path):
    bin_dir = tmp_path / "bin"
    nvidia_smi(bin_dir, [GPUS["8.6"]], driver_cuda="12.6")
    d = detect(env=env_with(bin_dir))
    assert d.toolkit.version == "12.6" and d.toolkit.source == "driver" and d.toolkit.compiler is None
    assert any("nvcc not found" in e for e in d.errors)
    plan = make_plan(d)
    assert plan.backend == "cpu" and "No CUDA compiler (nvcc)" in plan.problems[0]
    assert plan.toolkit == {"version": "12.6", "source": "driver"}


def test_the_compiler_wins_over_the_driver(tmp_path):
    bin_dir = tmp_path / "bin"
    nvcc(bin_dir, "12.4")
    nvidia_smi(bin_dir, [GPUS["12.0"]], driver_cuda="13.0")
    d = detect(env=env_with(bin_dir))
    assert d.driver_cuda_version == "13.0" and d.toolkit.version == "12.4" and d.toolkit.source == "PATH"
    plan = make_plan(d)
    assert plan.backend == "cpu" and "CUDA 12.4 cannot build for NVIDIA GeForce RTX 5090" in plan.problems[0]


def test_cudacxx_then_nvcc_then_path(tmp_path):
    bin_dir = tmp_path / "bin"
    nvcc(bin_dir, "13.0")
    nvidia_smi(bin_dir, [GPUS["9.0"]])
    cxx = nvcc(tmp_path / "cxx", "12.8")
    nv = nvcc(tmp_path / "nv", "12.4")
    d = detect(env=env_with(bin_dir, CUDACXX=str(cxx), NVCC=str(nv)))
    assert (d.toolkit.version, d.toolkit.source, d.toolkit.compiler) == ("12.8", "CUDACXX", str(cxx))
    d = detect(env=env_with(bin_dir, NVCC=str(nv)))
    assert (d.toolkit.version, d.toolkit.source) == ("12.4", "NVCC")
    d = detect(env=env_with(bin_dir))
    assert (d.toolkit.version, d.toolkit.source) == ("13.0", "PATH")
    # a CUDACXX that does not work is reported, and the next source is used
    d = detect(env=env_with(bin_dir, CUDACXX=str(tmp_path / "missing" / "nvcc")))
    assert d.toolkit.source == "PATH" and any("CUDACXX" in e for e in d.errors)


def test_apple_silicon_plans_metal(tmp_path):
    bin_dir = tmp_path / "bin"
    sysctl_apple(bin_dir, "Apple M3 Pro")
    d = detect(env=env_with(bin_dir), os_name="Darwin", machine="arm64")
    assert d.apple_silicon and d.metal and d.cpu == "Apple M3 Pro" and "neon" in d.cpu_features
    assert d.memory_bytes == 38654705664 and d.gpus == []
    plan = make_plan(d)
    assert plan.backend == "metal" and plan.cmake_args == "-DGGML_METAL=on" and plan.problems == []


def test_no_gpu_plans_cpu_and_detection_never_fails(tmp_path):
    bin_dir = tmp_path / "empty"
    bin_dir.mkdir()
    d = detect(env=env_with(bin_dir))
    assert d.gpus == [] and d.toolkit.version is None
    assert any("nvidia-smi not found" in e for e in d.errors)
    plan = make_plan(d)
    assert plan.backend == "cpu" and plan.cmake_args == "" and plan.problems == []
    assert make_plan(d, backend="metal").problems == ["Metal builds need a Mac with Apple Silicon."]


def test_broken_probes_are_reported_not_fatal(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    (bin_dir / "nvcc").write_text("#!/bin/sh\necho garbage\n")
    (bin_dir / "nvcc").chmod(0o755)
    d = detect(env=env_with(bin_dir))
    assert d.gpus == [] and d.toolkit.version is None
    assert any("status 9" in e for e in d.errors) and any("cannot find the release" in e for e in d.errors)


def test_cli_detect_and_plan_json_on_stand_ins(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    nvcc(bin_dir, "12.8")
    nvidia_smi(bin_dir, [GPUS["12.0"], GPUS["8.6"]])
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDACXX", raising=False)
    monkeypatch.delenv("NVCC", raising=False)
    plan = json.loads(mtp_studio("backend", "plan", "--json", check=True).stdout)
    assert plan["backend"] == "cuda" and plan["cuda_architectures"] == ["86", "120"]
    assert plan["toolkit"] == {"version": "12.8", "source": "PATH"}
    assert plan["gpus"] == [
        {"name": "NVIDIA GeForce RTX 5090", "compute_capability": "12.0"},
        {"name": "NVIDIA GeForce RTX 3090", "compute_capability": "8.6"},
    ]
    assert plan["problems"] == [] and "-DCMAKE_CUDA_ARCHITECTURES=86;120" in plan["cmake_args"]
    det = json.loads(mtp_studio("backend", "detect", "--json", check=True).stdout)
    assert [g["compute_capability"] for g in det["gpus"]] == ["12.0", "8.6"]
    assert det["in_use"]["build"] == "installed" and det["in_use"]["devices"][0]["type"] == "cpu"


def test_makefile_planner_prints_only_cmake_args(tmp_path):
    import subprocess
    import sys

    bin_dir = tmp_path / "bin"
    nvcc(bin_dir, "12.9")
    nvidia_smi(bin_dir, [GPUS["9.0"]])
    out = subprocess.run(
        [sys.executable, "-m", "engine.backends.plan", "--cmake-args"],
        capture_output=True,
        text=True,
        env=env_with(bin_dir),
        check=True,
    ).stdout
    assert out.strip() == f"-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER={bin_dir / 'nvcc'}"


def test_exact_plans_the_cpu_build_without_llamafile_and_says_what_gpus_lack(tmp_path):
    from engine.backends.builds import build_name

    empty = tmp_path / "empty"
    empty.mkdir()
    plan = make_plan(detect(env=env_with(empty)), exact=True)
    assert plan.backend == "cpu" and plan.cmake_args == "-DGGML_LLAMAFILE=OFF" and plan.problems == []
    assert any("bit-identical" in r for r in plan.reasons)
    assert build_name(plan).startswith("cpu-exact-")
    bin_dir = tmp_path / "bin"
    nvcc(bin_dir, "12.8")
    nvidia_smi(bin_dir, [GPUS["9.0"]])
    gpu = make_plan(detect(env=env_with(bin_dir)), exact=True)
    assert gpu.backend == "cpu" and "GGML_CUDA" not in gpu.cmake_args
    assert len(gpu.problems) == 1 and "CPU backend only" in gpu.problems[0]
