"""llama.cpp peer for bench/formats_bench.py, run with the Python that has llama-cpp-python installed
(an optional extra, usually a separate venv: it compiles llama.cpp from source). Standard library only.

    python bench/peer_llamacpp.py measure MODEL.gguf THREADS NEW_TOKENS < prompt_ids.json  -> JSON
    python bench/peer_llamacpp.py quantize IN.gguf OUT.gguf q8_0                          -> OUT.gguf
"""
from __future__ import annotations

import json
import sys
import time
from typing import Any

_FTYPES = {"q8_0": 7, "q4_1": 3, "f32": 0}  # llama.h LLAMA_FTYPE_*


def measure(path: str, threads: int, new_tokens: int, prompt: list[int]) -> dict[str, Any]:
    import llama_cpp

    n_ctx = max(2048, len(prompt) + new_tokens + 8)  # a 2,048-token prompt and its answer must fit
    llm = llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=512, n_threads=threads,
                          n_threads_batch=threads, verbose=False)

    def once(n: int) -> tuple[float, float]:
        llm.reset()
        gen = llm.generate(prompt, temp=0.0, top_k=1, reset=True)
        t0 = time.perf_counter()
        next(gen)  # prefill + first token: TTFT
        t1 = time.perf_counter()
        for _ in range(n - 1):
            next(gen)
        t2 = time.perf_counter()
        return (t1 - t0) * 1000, (t2 - t1) * 1000 / max(n - 1, 1)

    once(min(4, new_tokens))  # warm-up
    ttft, tpot = once(new_tokens)
    return {"ttft_ms": ttft, "tpot_ms": tpot, "llama_cpp_python": llama_cpp.__version__}


def quantize(src: str, dst: str, ftype: str) -> None:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = _FTYPES[ftype]
    params.allow_requantize = True  # the shipped file is already Q4_1
    if llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params) != 0:
        raise SystemExit(f"quantize {src} -> {dst} failed")


if __name__ == "__main__":
    if sys.argv[1] == "measure":
        ids = json.loads(sys.stdin.read())
        print(json.dumps(measure(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), ids)))
    elif sys.argv[1] == "quantize":
        quantize(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        raise SystemExit(__doc__)
