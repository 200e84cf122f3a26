#!/usr/bin/env python3
"""Fetches published chat templates for the reference tests: the llama-cpp-python source package
pinned in requirements.txt carries llama.cpp's models/templates (the templates of real model
releases). Downloads it once (SHA-256 checked), extracts every template of models/templates into the
per-user cache and prints that folder."""
import os
import re
import subprocess
import sys
import tarfile
import tempfile

from fetch_model import cache_root, sha256

SDIST_SHA256 = {"0.3.36": "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"}
# Templates the tests name one by one (all of models/templates is extracted).
TEMPLATES = [
    "meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct",
    "meta-llama-Llama-3.3-70B-Instruct", "Qwen-Qwen2.5-7B-Instruct",
    "mistralai-Mistral-Nemo-Instruct-2407", "Mistral-Small-3.2-24B-Instruct-2506",
    "unsloth-mistral-Devstral-Small-2507", "Qwen-QwQ-32B",
]


def cache_dir():
    return os.path.join(cache_root(), "chat_templates")


def pinned_version():
    req = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "requirements.txt")
    with open(req) as f:
        m = re.search(r"^llama-cpp-python==(\S+)$", f.read(), re.M)
    return m.group(1)


def main():
    dest = cache_dir()
    done = os.path.join(dest, ".complete")  # written after a full extraction
    if os.path.exists(done) and all(os.path.exists(os.path.join(dest, n + ".jinja")) for n in TEMPLATES):
        print(dest)
        return 0
    version = pinned_version()
    if version not in SDIST_SHA256:
        print(f"fetch_templates: no checksum for llama-cpp-python {version}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        print(f"downloading the llama-cpp-python {version} source package ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary",
                        ":all:", "-d", tmp, f"llama-cpp-python=={version}"], check=True,
                       stdout=sys.stderr)
        path = os.path.join(tmp, f"llama_cpp_python-{version}.tar.gz")
        got = sha256(path)
        if got != SDIST_SHA256[version]:
            print(f"fetch_templates: checksum mismatch for {path}: {got}", file=sys.stderr)
            return 1
        os.makedirs(dest, exist_ok=True)
        prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/models/templates/"
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                name = member.name[len(prefix):] if member.name.startswith(prefix) else ""
                if not member.isfile() or not name.endswith(".jinja") or "/" in name:
                    continue
                with open(os.path.join(dest, name), "wb") as out:
                    out.write(tar.extractfile(member).read())
        with open(done, "w") as f:
            f.write(version + "\n")
    print(dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
