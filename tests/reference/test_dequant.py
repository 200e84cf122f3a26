"""Bit-exactness of Tessera's reference dequantization against the gguf package.

Writes a GGUF with tensors of every weight type Tessera reads (legacy types quantized by
gguf.quants.quantize; K types, and Q3_K / IQ4_NL, which Tessera rewrites into Q6_K / Q8_0 at
load, as random raw blocks with finite f16 scales; IQ4_XS, rewritten into Q8_0 with f16 block
scales, to within that rounding), dumps each with the
hidden `tessera dump-tensor` command and requires the float32 bits to equal
gguf.quants.dequantize's. Also checks tensors of the real default model.

Env: TESSERA_BIN (default ./build/tessera), TESSERA_MODEL (default model path), CI (when set,
a missing binary or model fails instead of skipping).
"""
import os
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf.quants import dequantize, quantize  # noqa: E402

BIN = os.environ.get("TESSERA_BIN", "./build/tessera")
MODEL = os.environ.get("TESSERA_MODEL") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
    "tessera", "SmolLM2-135M-Instruct.Q4_1.gguf")


def need(path, what):
    if not os.path.exists(path):
        if os.environ.get("CI"):
            pytest.fail(f"{what} missing: {path}")
        pytest.skip(f"{what} missing: {path}")


def dump(model, name, out):
    need(BIN, "tessera binary")
    r = subprocess.run([BIN, "dump-tensor", str(model), name, str(out)], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, f"dump-tensor {name} failed: {r.stderr}"
    return np.fromfile(out, dtype=np.uint32)


def assert_bits_equal(got_bits, want_f32, name):
    want_bits = np.ascontiguousarray(want_f32, dtype=np.float32).reshape(-1).view(np.uint32)
    assert got_bits.shape == want_bits.shape, f"{name}: {got_bits.shape} vs {want_bits.shape}"
    if not np.array_equal(got_bits, want_bits):
        bad = np.flatnonzero(got_bits != want_bits)
        i = bad[0]
        pytest.fail(f"{name}: {bad.size} of {want_bits.size} elements differ; first at {i}: "
                    f"got {got_bits[i]:#010x} ({got_bits[i:i+1].view(np.float32)[0]}), "
                    f"want {want_bits[i]:#010x} ({want_bits[i:i+1].view(np.float32)[0]})")


# Offsets of the f16 scale fields inside each K block (the rest is random quant bits); Q3_K and
# IQ4_NL are read as the Q6_K / Q8_0 blocks Tessera rewrites them into at load.
K_SCALES = {Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,), Q.Q3_K: (108,), Q.IQ4_NL: (0,),
            Q.IQ4_XS: (0,)}
# Rewritten with each 32 weights' scale d * (scale - 32) rounded to f16 (not bit-exact).
ROUNDED_SCALES = {Q.IQ4_XS}


def random_k_blocks(rng, qtype, rows, cols):
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    nblocks = rows * cols // block_elems
    raw = rng.integers(0, 256, size=(nblocks, block_bytes), dtype=np.uint8)
    for off in K_SCALES[qtype]:
        scale = (rng.uniform(1e-4, 1e-1, size=nblocks) * rng.choice([-1, 1], size=nblocks))
        raw[:, off:off + 2] = scale.astype(np.float16).view(np.uint8).reshape(nblocks, 2)
    return raw.reshape(rows, cols // block_elems * block_bytes)


def special_halves(rng, n):
    """Random finite halves plus every class of special value (subnormals, inf, NaNs)."""
    with np.errstate(over="ignore"):  # values past 65504 become inf on purpose
        bits = rng.uniform(-70000, 70000, size=n).astype(np.float16).view(np.uint16)
    specials = np.array([0x0000, 0x8000, 0x0001, 0x03ff, 0x8001, 0x0400, 0x7bff, 0x7c00, 0xfc00,
                         0x7e00, 0xfe00, 0x7c01, 0x7d55, 0xfdff], dtype=np.uint16)
    bits[:specials.size] = specials
    return bits.view(np.float16)


def make_cases(rng):
    """name -> (array to write, raw_dtype or None, ggml type for dequantize)."""
    cases = {}
    f32 = rng.standard_normal((7, 96)).astype(np.float32)
    f32.reshape(-1)[:4] = [np.inf, -np.inf, 1e-40, -0.0]
    cases["f32"] = (f32, None, Q.F32)
    cases["f16"] = (special_halves(rng, 3 * 64).reshape(3, 64), None, Q.F16)
    bf = rng.standard_normal((5, 64)).astype(np.float32)
    cases["bf16"] = (quantize(bf, Q.BF16), Q.BF16, Q.BF16)
    for qtype in (Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1):
        for rows, cols in ((1, 32), (9, 96), (17, 576)):
            x = (rng.standard_normal((rows, cols)) * rng.uniform(0.01, 10)).astype(np.float32)
            cases[f"{qtype.name.lower()}_{rows}x{cols}"] = (quantize(x, qtype), qtype, qtype)
    for qtype in (Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.Q3_K, Q.IQ4_NL, Q.IQ4_XS):
        for rows, cols in ((1, 256), (5, 768)):
            raw = random_k_blocks(rng, qtype, rows, cols)
            cases[f"{qtype.name.lower()}_{rows}x{cols}"] = (raw, qtype, qtype)
    return cases


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    rng = np.random.default_rng(20240601)
    cases = make_cases(rng)
    path = tmp_path_factory.mktemp("gguf") / "all_types.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    for name, (arr, raw_dtype, _) in cases.items():
        w.add_tensor(name, arr, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, cases


@pytest.mark.parametrize("name", sorted(make_cases(np.random.default_rng(20240601))))
def test_synthetic_tensor_bit_exact(synthetic, tmp_path, name):
    path, cases = synthetic
    arr, _, qtype = cases[name]
    want = dequantize(arr, qtype)
    got = dump(path, name, tmp_path / f"{name}.f32")
    if qtype in ROUNDED_SCALES:
        got_f, want_f = got.view(np.float32), want.reshape(-1).astype(np.float32)
        err = np.abs(got_f - want_f)
        assert (err <= np.abs(want_f) * 2.0 ** -11).all(), f"{name}: max error {err.max()}"
        assert (err > 0).any(), "the f16 rounding should show somewhere"
        return
    assert_bits_equal(got, want, name)


@pytest.mark.parametrize("name", ["token_embd.weight", "blk.0.ffn_down.weight",
                                  "blk.29.attn_k.weight", "blk.0.attn_norm.weight"])
def test_default_model_tensor_bit_exact(tmp_path, name):
    need(MODEL, "default model (scripts/fetch_model.py)")
    reader = gguf.GGUFReader(MODEL)
    tensor = next((t for t in reader.tensors if t.name == name), None)
    assert tensor is not None, f"{name} not in {MODEL}"
    want = dequantize(tensor.data, tensor.tensor_type)
    got = dump(MODEL, name, tmp_path / "t.f32")
    assert_bits_equal(got, want, f"{name} ({tensor.tensor_type.name})")


def test_dump_tensor_rejects_bad_arguments(synthetic, tmp_path):
    need(BIN, "tessera binary")
    path, _ = synthetic
    r = subprocess.run([BIN, "dump-tensor", str(path), "no_such_tensor", str(tmp_path / "x")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "no_such_tensor" in r.stderr
    r = subprocess.run([BIN, "dump-tensor", str(path)], capture_output=True, text=True)
    assert r.returncode == 2
