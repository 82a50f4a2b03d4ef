"""llama.cpp as its users run it: `llama-bench`, `llama-server` and `llama-quantize` built from the llama.cpp
source vendored in llama-cpp-python's sdist, run in a clean environment.

- Build (`ensure_built`): `pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36`, unpack, then
  `cmake -B build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DCMAKE_BUILD_TYPE=Release` and
  `cmake --build build -j2 --target llama-server llama-bench llama-quantize llama-perplexity` (about 10
  minutes on 2 cores; llama-perplexity scores the GGUF types for bench/peer_quality.py).
  Cached outside the repository (~/.cache/finserve-peer); never part of `make test`.
- A smoke run after the build (`llama-bench`, 16 prompt tokens, the shipped GGUF). Where the native build dies on
  a signal, it is rebuilt as its users rebuild it, with GGML_NATIVE still on but AMX off (`-mno-amx-*`), and why
  is recorded (`native_failed.json`, copied into every result's build info): on an Intel Xeon with AMX here (a
  Firecracker VM), the native build's AMX matmul crashed in `ggml_backend_amx_mul_mat` (SIGSEGV or SIGILL,
  run to run) for Q4_0, Q4_1 and Q8_0 alike: llama.cpp issue 20824 and PR 26954 (the AMX tile config on the
  stack, permission asked for on the main thread only).
- Clean environment (`CLEAN_ENV`): the peer's processes get a PATH and HOME and nothing else: no OMP_*,
  KMP_*, GOMP_* or FINSERVE_* from finserve's process (ggml uses OpenMP; an inherited OMP_WAIT_POLICY
  changed its decode speed 3x). What the peer ran with is recorded in the JSON.
- GGUF types: the shipped Q4_1, and Q4_0 / Q8_0 re-quantized from it with `llama-quantize --allow-requantize`; or,
  for any other model (`--gguf FILE`), that file and each type made from it the same way (bench/gguf_files.py).
- Batch-1 figures come from `llama-bench` itself (its JSON output); HTTP figures from `llama-server -np N`
  (continuous batching, its default) driven by the same client as finserve (bench/http_peer.py).
"""
from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from bench.peer_server import Server, _ready

VERSION = "0.3.36"
SDIST = f"llama_cpp_python-{VERSION}"
TARGETS = ("llama-server", "llama-bench", "llama-quantize", "llama-perplexity")
GGUF_TYPES = ("Q4_0", "Q4_1", "Q8_0")
SHIPPED = "Q4_1"
CMAKE_FLAGS = ("-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DCMAKE_BUILD_TYPE=Release")
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"  # gcc: explicit -mno-* win over -march=native's features
NO_AMX_FLAGS = (f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}")
FLASH_ATTN = ("auto", "on", "off")  # llama-server's -fa settings (auto: its default)
NATIVE_FAILED = "native_failed.json"  # in the cache: why the native build is not used
# The whole environment of every peer process: nothing inherited from finserve's.
CLEAN_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(Path.home()),
             "LC_ALL": "C"}


def default_cache() -> Path:
    return Path.home() / ".cache" / "finserve-peer"


def parse_flash_attn(text: str) -> list[str]:
    """llama-server -fa settings from a comma-separated list (empty: its default, auto); ValueError names the bad ones."""
    settings = [x.strip().lower() for x in text.split(",") if x.strip()] or ["auto"]
    bad = [x for x in settings if x not in FLASH_ATTN]
    if bad:
        raise ValueError(f"unknown llama-server flash attention setting(s) {bad}; known: {list(FLASH_ATTN)}")
    return settings


@dataclass(frozen=True)
class Tools:
    bin_dir: Path
    info: dict[str, Any] = field(default_factory=dict)

    def path(self, name: str) -> Path:
        return self.bin_dir / name


def _source_dir(cache: Path) -> Path:
    return cache / SDIST / "vendor" / "llama.cpp"


def _build_dir(cache: Path) -> tuple[str, tuple[str, ...]]:
    """(build folder name, extra cmake flags): the native build, or the AMX-off one once the native one failed."""
    return ("build-no-amx", NO_AMX_FLAGS) if (cache / NATIVE_FAILED).is_file() else ("build", ())


def find_built(cache: Path | None = None) -> Tools | None:
    """The cached build in use (native, or AMX off after the native one crashed), or None when not built."""
    cache = cache or default_cache()
    src = _source_dir(cache)
    name, _ = _build_dir(cache)
    bin_dir = src / name / "bin"
    if not all((bin_dir / t).is_file() for t in TARGETS):
        return None
    info = build_info(src, name)
    if (cache / NATIVE_FAILED).is_file():
        info["native_build_failed"] = json.loads((cache / NATIVE_FAILED).read_text())
    return Tools(bin_dir, info)


def build_info(src: Path, name: str = "build") -> dict[str, Any]:
    cache_txt = src / name / "CMakeCache.txt"
    flags: dict[str, str] = {}
    if cache_txt.is_file():
        for line in cache_txt.read_text(errors="replace").splitlines():
            for key in ("GGML_NATIVE", "CMAKE_BUILD_TYPE", "CMAKE_C_COMPILER", "LLAMA_CURL", "GGML_OPENMP",
                        "CMAKE_C_FLAGS"):
                if line.startswith(key + ":"):
                    flags[key] = line.split("=", 1)[1]
    extra = NO_AMX_FLAGS if name == "build-no-amx" else ()
    return {"source": f"llama-cpp-python {VERSION} sdist (vendor/llama.cpp)", "build": name, "cmake": flags,
            "cmake_flags": [*CMAKE_FLAGS, *extra], "env": dict(CLEAN_ENV)}


def smoke(tools: Tools, model: Path, timeout_s: float = 300.0) -> str | None:
    """None when `llama-bench` runs a 16-token prompt on `model`; else how it failed (a signal: the build is unusable)."""
    argv = [str(tools.path("llama-bench")), "-m", str(model), "-t", "2", "-p", "16", "-n", "2", "-r", "1", "-o", "json"]
    out = subprocess.run(argv, env=CLEAN_ENV, capture_output=True, text=True, timeout=timeout_s)
    if out.returncode == 0:
        return None
    how = f"killed by signal {-out.returncode}" if out.returncode < 0 else f"exit {out.returncode}"
    return f"llama-bench {how}: {out.stderr.strip()[-500:]}"


def ensure_built(cache: Path | None = None, *, jobs: int = 2, log: IO[str] | None = sys.stderr) -> Tools:
    """The cached build, building it first when absent (download, unpack, cmake: ~10 minutes on 2 cores); a native
    build that dies on a signal in its smoke run is rebuilt with AMX off (module docstring)."""
    from engine.model.prepare import default_gguf_path

    cache = cache or default_cache()
    while True:
        tools = _build(cache, jobs, log)
        name, _ = _build_dir(cache)
        failed = smoke(tools, default_gguf_path())
        if failed is None:
            return tools
        if name != "build" or not failed.startswith("llama-bench killed"):
            raise RuntimeError(f"the llama.cpp build in {tools.bin_dir.parent} fails its smoke run: {failed}")
        if log is not None:
            print(f"the native build failed its smoke run ({failed}); rebuilding with {NO_AMX}", file=log, flush=True)
        (cache / NATIVE_FAILED).write_text(json.dumps({"smoke": failed, "rebuilt_with": NO_AMX}))


def _build(cache: Path, jobs: int, log: IO[str] | None) -> Tools:
    found = find_built(cache)
    if found is not None:
        return found
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / f"{SDIST}.tar.gz"
    if not archive.is_file():
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
              f"llama-cpp-python=={VERSION}", "-d", str(cache)], log)
    src = _source_dir(cache)
    if not (src / "CMakeLists.txt").is_file():
        with tarfile.open(archive) as tar:
            tar.extractall(cache, filter="data")
    name, extra = _build_dir(cache)
    _run(["cmake", "-S", str(src), "-B", str(src / name), *CMAKE_FLAGS, *extra], log)
    _run(["cmake", "--build", str(src / name), f"-j{jobs}", "--target", *TARGETS], log)
    built = find_built(cache)
    if built is None:
        raise RuntimeError(f"the llama.cpp build in {src / name} did not produce {list(TARGETS)}")
    return built


def _run(argv: list[str], log: IO[str] | None) -> None:
    if log is not None:
        print("+ " + " ".join(argv), file=log, flush=True)
    out = subprocess.run(argv, env=CLEAN_ENV, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({out.returncode}): {out.stderr.strip()[-2000:]}")


def gguf(tools: Tools, gguf_type: str, cache: Path | None = None, source: str | Path | None = None) -> Path:
    """`source` (a GGUF file; None: the shipped Q4_1) when it is of `gguf_type`, else its re-quantization to
    `gguf_type` with llama-quantize, made once into the cache (bench/gguf_files.py)."""
    from bench import gguf_files

    file, file_type, shipped = gguf_files.source(source)
    if gguf_type == file_type:
        return file
    if gguf_type not in GGUF_TYPES:
        raise ValueError(f"unknown GGUF type {gguf_type!r}; known: {list(GGUF_TYPES)}")
    out = gguf_files.derived_path((cache or default_cache()) / "gguf", file, shipped, gguf_type)
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".part")
        _run([str(tools.path("llama-quantize")), "--allow-requantize", str(file), str(tmp), gguf_type], None)
        tmp.rename(out)
    return out


def llama_bench(tools: Tools, model: Path, *, threads: int, reps: int = 3, prompt: str = "256,2048",
                gen: int | str = 128, depth: int = 0, flash_attn: str = "") -> list[dict[str, Any]]:
    """`llama-bench -o json`; one row per test: {test: 'pp256' | 'tg128' | 'tg32@d4096', tokens_per_s, ...}.

    `flash_attn` is llama-bench's `-fa` list ("0,1": each test with and without; one row each); "" its default."""
    argv = [str(tools.path("llama-bench")), "-m", str(model), "-t", str(threads), "-r", str(reps),
            "-p", prompt, "-n", str(gen), "-o", "json"]
    if depth:
        argv += ["-d", str(depth)]
    if flash_attn:
        argv += ["-fa", flash_attn]
    out = subprocess.run(argv, env=CLEAN_ENV, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"llama-bench failed ({out.returncode}): {out.stderr.strip()[-1500:]}")
    rows = []
    for r in json.loads(out.stdout):
        n_prompt, n_gen, n_depth = int(r.get("n_prompt", 0)), int(r.get("n_gen", 0)), int(r.get("n_depth", 0))
        test = f"pp{n_prompt}" if n_prompt else f"tg{n_gen}"
        if n_depth:
            test += f"@d{n_depth}"
        rows.append({"test": test, "tokens_per_s": float(r["avg_ts"]), "stddev_tokens_per_s": float(r["stddev_ts"]),
                     "ms_per_token": 1e3 / float(r["avg_ts"]), "threads": int(r.get("n_threads", threads)),
                     "model_type": r.get("model_type"), "model_size": r.get("model_size"),
                     "build_commit": r.get("build_commit"), "cpu_info": r.get("cpu_info"),
                     "flash_attn": r.get("flash_attn"),
                     "samples_ts": r.get("samples_ts")})
    return rows


def start_server(tools: Tools, model: Path, gguf_type: str, *, threads: int, parallel: int = 8,
                 ctx_per_slot: int = 2048, log: IO[bytes] | None = None, timeout_s: float = 120.0,
                 flash_attn: str = "auto") -> Server:
    """`llama-server -np parallel` (continuous batching) on a free 127.0.0.1 port, clean environment; `flash_attn`
    its -fa setting (FLASH_ATTN)."""
    if flash_attn not in FLASH_ATTN:
        raise ValueError(f"unknown flash attention setting {flash_attn!r}; known: {list(FLASH_ATTN)}")
    from jobs.runtime.redis_server import free_port

    port = free_port()
    argv = [str(tools.path("llama-server")), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
            "-t", str(threads), "-tb", str(threads), "-np", str(parallel), "-c", str(ctx_per_slot * parallel),
            "--no-webui", "-fa", flash_attn]
    proc = subprocess.Popen(argv, env=CLEAN_ENV, stdout=log, stderr=subprocess.STDOUT if log is not None else None,
                            start_new_session=True)
    server = Server(f"llama-server {gguf_type}", f"http://127.0.0.1:{port}", proc,
                    info={"gguf_type": gguf_type, "gguf": model.name, "gguf_bytes": model.stat().st_size,
                          "threads": threads, "parallel": parallel, "ctx_per_slot": ctx_per_slot,
                          "flash_attn": flash_attn,
                          "argv": argv[1:], **tools.info})
    return _ready(server, "/health", timeout_s)
