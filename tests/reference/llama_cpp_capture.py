"""Captures llama.cpp's intermediate tensors (by graph name, e.g. "ffn_swiglu-3") through the
scheduler's eval callback of the public C API, as float32 arrays of rows x ne0."""
import ctypes
import os

import numpy as np


def _ggml_base(llama_cpp):
    lib = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so"))
    for name, res, args in [("ggml_get_name", ctypes.c_char_p, [ctypes.c_void_p]),
                            ("ggml_nelements", ctypes.c_int64, [ctypes.c_void_p]),
                            ("ggml_nrows", ctypes.c_int64, [ctypes.c_void_p]),
                            ("ggml_get_data", ctypes.c_void_p, [ctypes.c_void_p]),
                            ("ggml_is_contiguous", ctypes.c_bool, [ctypes.c_void_p])]:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


def _quiet(_level, _text, _user):
    pass


_quiet_log = None


def capture(llama_cpp, model_path, ids, wanted, n_threads=None):
    """Runs `ids` as one batch and returns {name: array} for every f32 tensor whose name is in
    `wanted` (a set of names or a predicate)."""
    global _quiet_log
    C = llama_cpp.llama_cpp
    if _quiet_log is None:  # kept alive for the process: llama.cpp may hold on to it
        _quiet_log = C.llama_log_callback(_quiet)
    ggml = _ggml_base(llama_cpp)
    want = wanted if callable(wanted) else (lambda n: n in wanted)
    got = {}

    @C.ggml_backend_sched_eval_callback
    def callback(t, ask, _user):
        name = ggml.ggml_get_name(t).decode()
        if ask:
            return want(name)
        n, rows, data = ggml.ggml_nelements(t), ggml.ggml_nrows(t), ggml.ggml_get_data(t)
        if data and ggml.ggml_is_contiguous(t):
            arr = np.ctypeslib.as_array((ctypes.c_float * n).from_address(data))
            got[name] = arr.copy().reshape(rows, n // rows)
        return True

    # Silence llama.cpp's load/graph logging for the capture, then restore the logger.
    prev_cb, prev_user = C.llama_log_callback(), ctypes.c_void_p()
    C.llama_log_get(ctypes.byref(prev_cb), ctypes.byref(prev_user))
    C.llama_log_set(_quiet_log, None)
    try:
        return _run(C, ggml, callback, got, model_path, ids, n_threads)
    finally:
        C.llama_log_set(prev_cb, prev_user)


def _run(C, ggml, callback, got, model_path, ids, n_threads):
    C.llama_backend_init()
    model = C.llama_model_load_from_file(model_path.encode(), C.llama_model_default_params())
    assert model, f"llama.cpp cannot load {model_path}"
    try:
        cp = C.llama_context_default_params()
        cp.n_ctx = cp.n_batch = cp.n_ubatch = max(64, len(ids))
        cp.n_threads = cp.n_threads_batch = n_threads or os.cpu_count()
        cp.flash_attn_type = C.LLAMA_FLASH_ATTN_TYPE_DISABLED  # as llama_cpp.Llama's default
        cp.cb_eval = callback
        cp.cb_eval_user_data = None
        ctx = C.llama_init_from_model(model, cp)
        assert ctx
        try:
            tokens = (C.llama_token * len(ids))(*ids)
            assert C.llama_decode(ctx, C.llama_batch_get_one(tokens, len(ids))) == 0
        finally:
            C.llama_free(ctx)
    finally:
        C.llama_model_free(model)
    return got
