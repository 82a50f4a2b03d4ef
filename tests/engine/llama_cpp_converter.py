"""llama.cpp's own GGUF converter (convert_hf_to_gguf.py with its gguf-py), obtained as bench/llamacpp.py obtains the
llama.cpp source: `pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36`, then only the Python files
(the converter, its conversion/ package, gguf-py) and the real chat templates of models/templates/ are unpacked.
Nothing is built. Cached under ~/.cache/finserve-test (FINSERVE_TEST_CACHE): one download, then seconds a conversion.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

from util.filelock import exclusive_lock

VERSION = "0.3.36"
SDIST = f"llama_cpp_python-{VERSION}"
_KEEP = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/gguf/", "models/templates/")

# convert_hf_to_gguf.py names a BPE tokenizer's pre-tokenizer by hashing how it splits one test string, so only the
# released tokenizers it lists are recognised. A test tokenizer built with a known pre-tokenizer (llama3's regex,
# Qwen2's) is named the way convert_hf_to_gguf_update.py would register it; everything else is the converter's own.
_NAMED_PRE = """
import runpy, sys
src, pre = sys.argv[1], sys.argv[2]
sys.path[:0] = [src, src + "/gguf-py"]
import conversion.base
conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
sys.argv = [src + "/convert_hf_to_gguf.py", *sys.argv[3:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _cache() -> Path:
    return Path(os.environ.get("FINSERVE_TEST_CACHE", Path.home() / ".cache" / "finserve-test"))


def llama_cpp_source() -> Path:
    """The unpacked vendor/llama.cpp folder (the converter, gguf-py and models/templates only)."""
    cache = _cache()
    src = cache / SDIST / "vendor" / "llama.cpp"
    if (src / "convert_hf_to_gguf.py").is_file():
        return src
    cache.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(cache / f".{SDIST}.lock"):
        if (src / "convert_hf_to_gguf.py").is_file():
            return src
        archive = cache / f"{SDIST}.tar.gz"
        if not archive.is_file():
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                            f"llama-cpp-python=={VERSION}", "-d", str(cache)], check=True)
        prefix = f"{SDIST}/vendor/llama.cpp/"
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.isfile() and m.name.startswith(prefix)
                       and m.name[len(prefix):].startswith(_KEEP)]
            tar.extractall(cache, members=members, filter="data")
        archive.unlink()  # 77 MB; only the 2 MB of Python files unpacked above are used
    return src


def convert_to_gguf(hf_dir: Path, out: Path, *, pre: str | None = None, outtype: str = "f32") -> Path:
    """Run llama.cpp's convert_hf_to_gguf.py on an HF folder (with this venv's python); `pre` names the BPE
    pre-tokenizer of a test tokenizer the converter cannot recognise by its hash (see _NAMED_PRE)."""
    src = llama_cpp_source()
    args = [str(hf_dir), "--outtype", outtype, "--outfile", str(out)]
    env = {**os.environ, "PYTHONPATH": f"{src / 'gguf-py'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    argv = [sys.executable, "-c", _NAMED_PRE, str(src), pre, *args] if pre else \
        [sys.executable, str(src / "convert_hf_to_gguf.py"), *args]
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"convert_hf_to_gguf.py failed on {hf_dir}:\n{done.stderr[-3000:]}")
    return out


def template(name: str) -> str:
    """A released model's chat template as llama.cpp ships it for its own tests (models/templates/<name>.jinja)."""
    return (llama_cpp_source() / "models" / "templates" / f"{name}.jinja").read_text(encoding="utf-8")
