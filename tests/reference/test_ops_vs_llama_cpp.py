"""Single CPU ops against llama.cpp, bit for bit, on the inputs llama.cpp itself saw: the
intermediates of its forward pass are captured through its eval callback
(llama_cpp_capture.py) and fed to the same Tessera op (`tessera op`, a hidden command), on the
default ISA path and on the portable one (TESSERA_ISA=scalar).

- SwiGLU (kernels/cpu/silu.h): ggml computes SiLU with its own vector exp in blocks of 16 per
  row and libm's expf for each row's tail. Inputs: the default model (rows of 1536 = 96
  blocks) and a tiny random model with rows of 200 (12 blocks + an 8-element tail) whose large
  FFN-norm weights drive gate values into the exp's overflow and underflow ranges; plus hostile
  inputs through ggml_vec_swiglu_f32 directly where the library exports it.
- RMSNorm: ggml's rounding steps (f32 squares summed in double, f32 mean and scale).

The reproduced SiLU is ggml's AVX-512 one, so the tests skip where llama.cpp was not built
with AVX-512. Sensitivity: with libm's expf in SiLU, ~28% of the default model's SwiGLU
outputs differ; with the previous all-double RMSNorm, ~24% of the norm outputs do."""
import ctypes
import os
import tempfile

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader

from conftest import llama_cpp_avx512, run_tessera
from llama_cpp_capture import capture
from test_tiny_models_vs_llama_cpp import write_tiny_model

ISAS = ("default", "scalar")


@pytest.fixture(scope="module")
def ggml_avx512(llama_cpp):
    if not llama_cpp_avx512(llama_cpp):
        pytest.skip("llama.cpp here is not an AVX-512 build, whose SiLU Tessera reproduces")


def tessera_op(tessera_bin, op, isa, d, *args):
    """Runs `tessera op OP D ...`; numpy arguments are written to files, the output read back."""
    with tempfile.TemporaryDirectory() as tmp:
        argv = []
        for i, a in enumerate(args):
            if isinstance(a, np.ndarray):
                path = os.path.join(tmp, f"in{i}.f32")
                np.ascontiguousarray(a, np.float32).tofile(path)
                argv.append(path)
            else:
                argv.append(a)
        out = os.path.join(tmp, "out.f32")
        saved = os.environ.get("TESSERA_ISA")
        if isa == "scalar":
            os.environ["TESSERA_ISA"] = "scalar"
        try:
            run_tessera(tessera_bin, "op", op, d, *argv, out)
        finally:
            if isa == "scalar":
                if saved is None:
                    os.environ.pop("TESSERA_ISA")
                else:
                    os.environ["TESSERA_ISA"] = saved
        return np.fromfile(out, dtype=np.float32)


def assert_same_bits(got, want, inputs, what):
    got = got.reshape(want.shape)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    bad = np.flatnonzero(~same.ravel())
    assert bad.size == 0, (
        f"{what}: {bad.size} of {same.size} elements differ; first at {bad[:5]}: input "
        f"{inputs.ravel()[bad[:5]]}, llama.cpp {want.ravel()[bad[:5]]}, tessera {got.ravel()[bad[:5]]}")


def check_swiglu(llama_cpp, tessera_bin, path, n_layers, ids):
    names = {f"{k}-{i}" for i in range(n_layers) for k in ("ffn_gate", "ffn_up", "ffn_swiglu")}
    t = capture(llama_cpp, path, ids, names)
    assert set(t) == names, f"llama.cpp did not produce {sorted(names - set(t))[:5]}"
    gate = np.concatenate([t[f"ffn_gate-{i}"] for i in range(n_layers)])
    up = np.concatenate([t[f"ffn_up-{i}"] for i in range(n_layers)])
    want = np.concatenate([t[f"ffn_swiglu-{i}"] for i in range(n_layers)])
    for isa in ISAS:
        got = tessera_op(tessera_bin, "swiglu", isa, gate.shape[1], gate, up)
        assert_same_bits(got, want, gate, f"swiglu, {os.path.basename(path)} ({isa} ISA path)")
    return gate


@pytest.mark.usefixtures("ggml_avx512")
def test_swiglu_bits_match_llama_cpp_default_model(llama_cpp, tessera_bin, model_path):
    rng = np.random.default_rng(3)
    ids = [int(t) for t in rng.integers(3, 49152, size=40)]
    gate = check_swiglu(llama_cpp, tessera_bin, model_path, 30, ids)
    # (llama.cpp's last layer only computes the rows whose logits are wanted: the last one)
    assert gate.shape == (29 * 40 + 1, 1536)


@pytest.mark.usefixtures("ggml_avx512")
def test_swiglu_bits_match_llama_cpp_tail_and_extremes(llama_cpp, tessera_bin, model_path):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tiny_dff200.gguf")
        write_tiny_model(path, model_path, "llama", Q.F32, d_ff=200, ffn_norm=(-150.0, 150.0))
        rng = np.random.default_rng(4)
        ids = [int(t) for t in rng.integers(3, 49152, size=48)]
        gate = check_swiglu(llama_cpp, tessera_bin, path, 2, ids)
    assert gate.shape == (48 + 1, 200)
    # The exp's special ranges were reached: e^-x overflows (x < -88.7) and is subnormal
    # (x > 87.3) for some elements, in the vector part and in the tail of a row.
    for part in (gate[:, :192], gate[:, 192:]):
        assert (part < -89).any() and (part > 88).any()


@pytest.mark.usefixtures("ggml_avx512")
def test_swiglu_bits_match_ggml_on_hostile_inputs(llama_cpp, tessera_bin):
    lib = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-cpu.so"))
    fn = getattr(lib, "ggml_vec_swiglu_f32", None)
    if fn is None:
        pytest.skip("this libggml-cpu does not export ggml_vec_swiglu_f32")
    fn.restype = None
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    rng = np.random.default_rng(5)
    sweep = np.arange(-110, 110, 1 / 512, dtype=np.float32)
    mags = (10.0 ** rng.uniform(-40, 38.5, sweep.size)) * rng.choice([-1.0, 1.0], sweep.size)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 1e-45, -1e-45,
                        1.17549435e-38, -1.17549435e-38], dtype=np.float64)
    x = np.concatenate([sweep, mags.astype(np.float32), special.astype(np.float32)])
    for d in (4096, 37):  # whole blocks, and rows with a 5-element libm tail
        n = -(-x.size // d) * d
        gate = np.resize(x, n).astype(np.float32).reshape(-1, d)
        up = rng.uniform(-2, 2, size=gate.shape).astype(np.float32)
        want = np.empty_like(gate)
        for r in range(gate.shape[0]):
            fn(d, want[r].ctypes.data, gate[r].ctypes.data, up[r].ctypes.data)
        for isa in ISAS:
            assert_same_bits(tessera_op(tessera_bin, "swiglu", isa, d, gate, up), want, gate,
                             f"swiglu, rows of {d} ({isa} ISA path)")


def test_rms_norm_bits_match_llama_cpp(llama_cpp, tessera_bin, model_path):
    """Both norms of every layer: attn_norm(embd or the previous layer's output) and
    ffn_norm(ffn_inp), each including the multiplication by its weight."""
    reader = GGUFReader(model_path)
    eps = float(reader.fields["llama.attention.layer_norm_rms_epsilon"].contents())
    weights = {t.name: np.array(t.data, dtype=np.float32) for t in reader.tensors if "norm" in t.name}
    n_layers = 30
    names = {"embd"} | {f"{k}-{i}" for i in range(n_layers)
                        for k in ("attn_norm", "ffn_inp", "ffn_norm", "l_out")}
    rng = np.random.default_rng(6)
    ids = [int(t) for t in rng.integers(3, 49152, size=24)]
    t = capture(llama_cpp, model_path, ids, names)
    checked = 0
    for i in range(n_layers):
        pairs = [(t["embd"] if i == 0 else t[f"l_out-{i - 1}"], f"blk.{i}.attn_norm.weight", t[f"attn_norm-{i}"]),
                 (t[f"ffn_inp-{i}"], f"blk.{i}.ffn_norm.weight", t[f"ffn_norm-{i}"])]
        for x, wname, want in pairs:
            if x.shape != want.shape:  # the last layer keeps only the output row part-way
                x = x[-want.shape[0]:]
            for isa in ISAS:
                got = tessera_op(tessera_bin, "rms_norm", isa, x.shape[1], repr(eps), x, weights[wname])
                assert_same_bits(got, want, x, f"rms_norm {wname} ({isa} ISA path)")
            checked += want.shape[0]
    assert checked >= 2 * 29 * 24
