"""stepgraph_ctypes.py: a small ctypes wrapper of stepgraph's C interface (libstepgraph_c.so,
kernels/capi/stepgraph_c.h, docs/C-API.md) for PyTorch tensors on a CUDA device.

Defines conv_update(), postconv() and conv_fwd() (plus conv_fwd_device_meta() for the
capture-safe form of conv_fwd), arms(), version() and StepgraphError. Each function passes the
tensors' data_ptr()s, sizes, row strides and dtypes to the C entry point, on the tensors' device and
torch.cuda.current_stream(); nothing is synchronised. Errors from the library raise StepgraphError
(code, status name, message); shape errors found here raise ValueError or TypeError.

The library is found at $STEPGRAPH_LIB (the .so itself, or a folder holding it), else in the first
of build-gpu/, build/, build-capi/ under the repository root (kernels/capi/libstepgraph_c.so).
"""
import ctypes
import os
import pathlib

import torch

API_VERSION = 1  # SG_C_API_VERSION of the header these structs mirror

SG_F32, SG_BF16 = 0, 1
STATUS = [
    "SG_OK",
    "SG_ERR_POINTER",
    "SG_ERR_ARM",
    "SG_ERR_ARM_UNAVAILABLE",
    "SG_ERR_DTYPE",
    "SG_ERR_SIZE",
    "SG_ERR_SEQLENS",
    "SG_ERR_WORKSPACE",
    "SG_ERR_CAPTURE",
    "SG_ERR_CUDA",
    "SG_ERR_INTERNAL",
]

_c_int, _c_i64, _vp = ctypes.c_int, ctypes.c_int64, ctypes.c_void_p


class ConvUpdateArgs(ctypes.Structure):
    """sg_conv_update_args"""

    _fields_ = [
        ("x", _vp), ("x_stride", _c_i64), ("x_dtype", _c_int),
        ("out", _vp), ("out_dtype", _c_int),
        ("state", _vp), ("state_dtype", _c_int),
        ("slots", _vp), ("w", _vp), ("bias", _vp),
        ("rows", _c_int), ("C", _c_int), ("K", _c_int), ("silu", _c_int),
    ]


class PostconvArgs(ctypes.Structure):
    """sg_postconv_args"""

    _fields_ = [
        ("conv", _vp), ("conv_stride", _c_i64), ("conv_dtype", _c_int),
        ("a", _vp), ("a_stride", _c_i64),
        ("b", _vp), ("b_stride", _c_i64), ("ab_dtype", _c_int),
        ("A_log", _vp), ("dt_bias", _vp),
        ("q", _vp), ("k", _vp), ("v", _vp), ("qkv_dtype", _c_int),
        ("g", _vp), ("beta", _vp),
        ("T", _c_int), ("Hk", _c_int), ("Hv", _c_int), ("Dk", _c_int), ("Dv", _c_int),
    ]


class ConvChunk(ctypes.Structure):
    """sg_conv_chunk (12 bytes: seq, start, len)"""

    _fields_ = [("seq", ctypes.c_int32), ("start", ctypes.c_int32), ("len", ctypes.c_int32)]


class ConvFwdArgs(ctypes.Structure):
    """sg_conv_fwd_args"""

    _fields_ = [
        ("x", _vp), ("x_stride", _c_i64), ("x_dtype", _c_int),
        ("out", _vp), ("out_dtype", _c_int),
        ("state", _vp), ("state_dtype", _c_int),
        ("w", _vp), ("bias", _vp),
        ("cu_seqlens", _vp), ("slots", _vp), ("has_history", _vp),
        ("C", _c_int), ("K", _c_int), ("max_tokens", _c_int), ("max_seqs", _c_int), ("silu", _c_int),
        ("n_seqs", _vp), ("chunks", _vp), ("n_chunks", _vp),
        ("cu_seqlens_host", _vp), ("N", _c_int),
        ("workspace", _vp), ("workspace_bytes", ctypes.c_size_t),
    ]


class StepgraphError(RuntimeError):
    """A nonzero code from the C interface, with its status name and sg_last_error() message."""

    def __init__(self, code, message):
        self.code = code
        self.status = STATUS[code] if 0 <= code < len(STATUS) else "SG_ERR_UNKNOWN"
        self.message = message
        super().__init__(f"{self.status} ({code}): {message}")


_lib = None


def _find_lib():
    env = os.environ.get("STEPGRAPH_LIB")
    if env:
        p = pathlib.Path(env)
        return p / "libstepgraph_c.so" if p.is_dir() else p
    root = pathlib.Path(__file__).resolve().parents[2]
    for build in ("build-gpu", "build", "build-capi"):
        p = root / build / "kernels" / "capi" / "libstepgraph_c.so"
        if p.exists():
            return p
    raise FileNotFoundError("libstepgraph_c.so not found: build stepgraph (target stepgraph_c) or set STEPGRAPH_LIB")


def lib():
    """The loaded library (loaded once), with argument and return types declared."""
    global _lib
    if _lib is not None:
        return _lib
    L = ctypes.CDLL(str(_find_lib()))
    P = ctypes.POINTER
    L.sg_version.argtypes, L.sg_version.restype = [], _c_int
    L.sg_last_error.argtypes, L.sg_last_error.restype = [], ctypes.c_char_p
    L.sg_last_launch.argtypes, L.sg_last_launch.restype = [], ctypes.c_char_p
    L.sg_status_name.argtypes, L.sg_status_name.restype = [_c_int], ctypes.c_char_p
    L.sg_arms.argtypes, L.sg_arms.restype = [], ctypes.c_char_p
    L.sg_conv_update.argtypes, L.sg_conv_update.restype = [P(ConvUpdateArgs), ctypes.c_char_p, _vp], _c_int
    L.sg_postconv.argtypes, L.sg_postconv.restype = [P(PostconvArgs), ctypes.c_char_p, _vp], _c_int
    L.sg_conv_fwd.argtypes = [P(ConvFwdArgs), ctypes.c_char_p, ctypes.c_char_p, _vp]
    L.sg_conv_fwd.restype = _c_int
    L.sg_conv_build_chunks.argtypes = [_vp, _c_int, _vp, _c_int, P(_c_int)]
    L.sg_conv_build_chunks.restype = _c_int
    L.sg_conv_max_chunks.argtypes, L.sg_conv_max_chunks.restype = [_c_int, _c_int, P(_c_int)], _c_int
    L.sg_conv_fwd_workspace_bytes.argtypes = [_c_int, _c_int, P(ctypes.c_size_t)]
    L.sg_conv_fwd_workspace_bytes.restype = _c_int
    got = L.sg_version()
    if got != API_VERSION:
        raise RuntimeError(f"libstepgraph_c.so has C API version {got}, this wrapper expects {API_VERSION}")
    _lib = L
    return L


def _check(rc):
    if rc != 0:
        raise StepgraphError(rc, lib().sg_last_error().decode())


def version():
    return lib().sg_version()


def arms():
    """The arm table (one line per op) and the entry points."""
    return lib().sg_arms().decode()


def last_launch():
    """What the last successful call on this thread launched: op=arm, kernel, grid, block."""
    return lib().sg_last_launch().decode()


# --- tensor helpers ------------------------------------------------------------------------------

def _dtype(t, name):
    if t.dtype == torch.float32:
        return SG_F32
    if t.dtype == torch.bfloat16:
        return SG_BF16
    raise TypeError(f"{name}: dtype {t.dtype} is not supported (float32 or bfloat16)")


def _need(t, name, dtype=None, shape=None, device=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor")
    if not t.is_cuda:
        raise ValueError(f"{name} must be on a CUDA device (got {t.device})")
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device}, expected {device}")
    if dtype is not None and t.dtype != dtype:
        raise TypeError(f"{name} must be {dtype} (got {t.dtype})")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)} (got {tuple(t.shape)})")


def _contig(t, name):
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous")


def _rows(t, name, min_cols):
    """(row stride) of a 2-D view whose rows are contiguous, with at least min_cols columns."""
    if t.dim() != 2 or (t.shape[1] > 1 and t.stride(1) != 1):
        raise ValueError(f"{name} must be 2-D with contiguous rows (shape {tuple(t.shape)}, strides {t.stride()})")
    if t.shape[1] < min_cols:
        raise ValueError(f"{name} has {t.shape[1]} columns, needs >= {min_cols}")
    return t.stride(0) if t.shape[0] > 1 else t.shape[1]


def _weights(w):
    """[C, K] f32 contiguous (a Hugging Face conv1d.weight [C, 1, K] is accepted)."""
    if w.dim() == 3 and w.shape[1] == 1:
        w = w[:, 0, :]
    if w.dim() != 2:
        raise ValueError(f"w must be [C, K] or [C, 1, K] (got {tuple(w.shape)})")
    return w.float().contiguous()


def _stream(device):
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)


def _arm(name):
    return None if name is None else name.encode()


def _p(t):
    return None if t is None else t.data_ptr()


# --- ops -----------------------------------------------------------------------------------------

def conv_update(x, state, w, slots, bias=None, arm=None, out=None, out_dtype=None, silu=True):
    """conv.update: one new token per row. x [rows, >= C] (rows contiguous; a wider view is read
    through its row stride), state [num_slots, C, K-1] (updated in place), w [C, K] (or [C, 1, K]),
    slots [rows] int32 (< 0: padding row), bias [C] or None. Returns out [rows, C]."""
    dev = x.device
    w = _weights(w).to(dev)
    C, K = w.shape
    _need(x, "x", device=dev)
    rows = x.shape[0]
    stride = _rows(x, "x", C)
    _need(state, "state", device=dev)
    _contig(state, "state")
    if state.dim() != 3 or tuple(state.shape[1:]) != (C, K - 1):
        raise ValueError(f"state must be [num_slots, {C}, {K - 1}] (got {tuple(state.shape)})")
    slots = slots.to(device=dev, dtype=torch.int32).contiguous()
    _need(slots, "slots", shape=(rows,))
    if bias is not None:
        bias = bias.to(device=dev, dtype=torch.float32).contiguous()
        _need(bias, "bias", shape=(C,))
    if out is None:
        out = torch.empty(rows, C, device=dev, dtype=out_dtype or x.dtype)
    _need(out, "out", shape=(rows, C), device=dev)
    _contig(out, "out")
    a = ConvUpdateArgs(
        x=_p(x), x_stride=stride, x_dtype=_dtype(x, "x"),
        out=_p(out), out_dtype=_dtype(out, "out"),
        state=_p(state), state_dtype=_dtype(state, "state"),
        slots=_p(slots), w=_p(w), bias=_p(bias),
        rows=rows, C=C, K=K, silu=int(bool(silu)),
    )
    with torch.cuda.device(dev):
        _check(lib().sg_conv_update(ctypes.byref(a), _arm(arm), _stream(dev)))
    return out


def postconv(conv, a, b, A_log, dt_bias, Hk, Hv, Dk, Dv, arm=None, qkv_dtype=None, out=None):
    """postconv: conv [T, >= 2*Hk*Dk + Hv*Dv] (q | k | v channels), a and b [T, >= Hv], A_log and
    dt_bias [Hv] (f32). Returns (q [T, Hk, Dk], k [T, Hk, Dk], v [T, Hv, Dv], g [T, Hv] f32,
    beta [T, Hv] f32); q, k, v in qkv_dtype (default conv's dtype). `out`: that tuple, to write into."""
    dev = conv.device
    C = 2 * Hk * Dk + Hv * Dv
    _need(conv, "conv", device=dev)
    T = conv.shape[0]
    cs = _rows(conv, "conv", C)
    _need(a, "a", device=dev)
    _need(b, "b", device=dev)
    if a.dtype != b.dtype:
        raise TypeError(f"a and b must have one dtype (got {a.dtype} and {b.dtype})")
    if a.shape[0] != T or b.shape[0] != T:
        raise ValueError(f"a and b must have T = {T} rows")
    as_, bs = _rows(a, "a", Hv), _rows(b, "b", Hv)
    A_log = A_log.to(device=dev, dtype=torch.float32).contiguous()
    dt_bias = dt_bias.to(device=dev, dtype=torch.float32).contiguous()
    _need(A_log, "A_log", shape=(Hv,))
    _need(dt_bias, "dt_bias", shape=(Hv,))
    if out is None:
        qd = qkv_dtype or conv.dtype
        out = (
            torch.empty(T, Hk, Dk, device=dev, dtype=qd),
            torch.empty(T, Hk, Dk, device=dev, dtype=qd),
            torch.empty(T, Hv, Dv, device=dev, dtype=qd),
            torch.empty(T, Hv, device=dev, dtype=torch.float32),
            torch.empty(T, Hv, device=dev, dtype=torch.float32),
        )
    q, k, v, g, beta = out
    for t, name, shape in ((q, "q", (T, Hk, Dk)), (k, "k", (T, Hk, Dk)), (v, "v", (T, Hv, Dv))):
        _need(t, name, shape=shape, device=dev)
        _contig(t, name)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError("q, k and v must have one dtype")
    for t, name in ((g, "g"), (beta, "beta")):
        _need(t, name, dtype=torch.float32, shape=(T, Hv), device=dev)
        _contig(t, name)
    args = PostconvArgs(
        conv=_p(conv), conv_stride=cs, conv_dtype=_dtype(conv, "conv"),
        a=_p(a), a_stride=as_, b=_p(b), b_stride=bs, ab_dtype=_dtype(a, "a"),
        A_log=_p(A_log), dt_bias=_p(dt_bias),
        q=_p(q), k=_p(k), v=_p(v), qkv_dtype=_dtype(q, "q"),
        g=_p(g), beta=_p(beta),
        T=T, Hk=Hk, Hv=Hv, Dk=Dk, Dv=Dv,
    )
    with torch.cuda.device(dev):
        _check(lib().sg_postconv(ctypes.byref(args), _arm(arm), _stream(dev)))
    return q, k, v, g, beta


def build_chunks(cu_seqlens):
    """The `exact` descriptors of a cu_seqlens (any tensor or list) as a CPU int32 tensor [n, 3]."""
    cu = torch.as_tensor(cu_seqlens, dtype=torch.int32).cpu().contiguous()
    N = cu.numel() - 1
    n = ctypes.c_int(0)
    _check(lib().sg_conv_build_chunks(cu.data_ptr(), N, None, 0, ctypes.byref(n)))
    out = torch.zeros(max(n.value, 1), 3, dtype=torch.int32)
    _check(lib().sg_conv_build_chunks(cu.data_ptr(), N, out.data_ptr(), n.value, ctypes.byref(n)))
    return out[: n.value]


def max_chunks(max_tokens, max_seqs):
    n = ctypes.c_int(0)
    _check(lib().sg_conv_max_chunks(max_tokens, max_seqs, ctypes.byref(n)))
    return n.value


def conv_fwd_device_meta(cu_seqlens, max_tokens, max_seqs, device, meta=None):
    """Device metadata (form (a), capture-safe) for conv_fwd(meta=...): a dict of n_seqs [1],
    chunks [max_chunks(max_tokens, max_seqs), 3] and n_chunks [1], int32 tensors on `device`.
    With `meta`, its tensors are refilled in place (for a captured graph: the replay reads them)."""
    cu = torch.as_tensor(cu_seqlens, dtype=torch.int32).cpu()
    ch = build_chunks(cu)
    cap = max_chunks(max_tokens, max_seqs)
    if ch.shape[0] > cap:
        raise ValueError(f"{ch.shape[0]} descriptors exceed the bucket's {cap}")
    if meta is None:
        meta = {
            "n_seqs": torch.zeros(1, dtype=torch.int32, device=device),
            "chunks": torch.zeros(max(cap, 1), 3, dtype=torch.int32, device=device),
            "n_chunks": torch.zeros(1, dtype=torch.int32, device=device),
            "max_tokens": max_tokens,
            "max_seqs": max_seqs,
        }
    meta["n_seqs"].fill_(cu.numel() - 1)
    meta["n_chunks"].fill_(ch.shape[0])
    if ch.shape[0]:
        meta["chunks"][: ch.shape[0]].copy_(ch)
    return meta


def conv_fwd(x, state, w, cu_seqlens, slots, has_history, bias=None, arm=None, chunks_arm=None, out=None,
             out_dtype=None, silu=True, max_tokens=0, max_seqs=0, meta=None):
    """conv.fwd over a packed varlen batch: x [>= T, >= C] (rows contiguous), state
    [num_slots, C, K-1] (updated in place), w [C, K] (or [C, 1, K]), cu_seqlens [N+1], slots [N]
    (< 0: padding sequence), has_history [N] (bool or uint8), bias [C] or None. Returns out [T, C].
    Without `meta` (host metadata, form (b)): cu_seqlens is copied to the host (a synchronisation),
    the call uploads the descriptors into a workspace; not capture-safe. With `meta` from
    conv_fwd_device_meta() (form (a)): no host copy; cu_seqlens, slots and has_history must then
    be device tensors of the bucket's sizes (max_seqs + 1, max_seqs, max_seqs) and out is required
    ([>= T, C] with T unknown here)."""
    dev = x.device
    if meta is None and torch.cuda.is_current_stream_capturing():  # refuse before any host copy
        raise StepgraphError(8, "sg_conv_fwd: the stream is being captured: host metadata needs copies, "
                                "which cannot be captured; pass meta=conv_fwd_device_meta(...) instead")
    w = _weights(w).to(dev)
    C, K = w.shape
    _need(x, "x", device=dev)
    stride = _rows(x, "x", C)
    _need(state, "state", device=dev)
    _contig(state, "state")
    if state.dim() != 3 or tuple(state.shape[1:]) != (C, K - 1):
        raise ValueError(f"state must be [num_slots, {C}, {K - 1}] (got {tuple(state.shape)})")
    if bias is not None:
        bias = bias.to(device=dev, dtype=torch.float32).contiguous()
        _need(bias, "bias", shape=(C,))
    cu_dev = cu_seqlens.to(device=dev, dtype=torch.int32).contiguous()
    slots = slots.to(device=dev, dtype=torch.int32).contiguous()
    hist = has_history.to(device=dev, dtype=torch.uint8).contiguous()
    args = ConvFwdArgs(
        x=_p(x), x_stride=stride, x_dtype=_dtype(x, "x"),
        state=_p(state), state_dtype=_dtype(state, "state"),
        w=_p(w), bias=_p(bias),
        cu_seqlens=_p(cu_dev), slots=_p(slots), has_history=_p(hist),
        C=C, K=K, silu=int(bool(silu)),
    )
    keep = []
    if meta is None:
        cu_host = cu_seqlens.to(device="cpu", dtype=torch.int32).contiguous()
        N = cu_host.numel() - 1
        T = int(cu_host[-1])
        if slots.numel() < N or hist.numel() < N:
            raise ValueError(f"slots and has_history need N = {N} entries")
        if x.shape[0] < T:
            raise ValueError(f"x has {x.shape[0]} rows, cu_seqlens needs T = {T}")
        mt, ms = max_tokens or T, max_seqs or N
        if cu_dev.numel() < ms + 1 or slots.numel() < ms or hist.numel() < ms:
            raise ValueError(f"cu_seqlens, slots, has_history need {ms + 1}, {ms}, {ms} entries for max_seqs = {ms}")
        nbytes = ctypes.c_size_t(0)
        _check(lib().sg_conv_fwd_workspace_bytes(mt, ms, ctypes.byref(nbytes)))
        ws = torch.empty(max(nbytes.value, 16), dtype=torch.uint8, device=dev)
        keep += [cu_host, ws]
        args.cu_seqlens_host, args.N = cu_host.data_ptr(), N
        args.workspace, args.workspace_bytes = ws.data_ptr(), ws.numel()
        args.max_tokens, args.max_seqs = max_tokens, max_seqs
        if out is None:
            out = torch.empty(T, C, device=dev, dtype=out_dtype or x.dtype)
        if out.shape[0] < T:
            raise ValueError(f"out has {out.shape[0]} rows, needs T = {T}")
    else:
        mt, ms = meta["max_tokens"], meta["max_seqs"]
        if cu_dev.numel() < ms + 1 or slots.numel() < ms or hist.numel() < ms:
            raise ValueError(f"cu_seqlens, slots, has_history need {ms + 1}, {ms}, {ms} entries for max_seqs = {ms}")
        if out is None:
            raise ValueError("out is required with device metadata")
        args.n_seqs, args.chunks, args.n_chunks = (_p(meta["n_seqs"]), _p(meta["chunks"]), _p(meta["n_chunks"]))
        args.max_tokens, args.max_seqs = mt, ms
    _need(out, "out", device=dev)
    _contig(out, "out")
    if out.dim() != 2 or out.shape[1] != C:
        raise ValueError(f"out must be [>= T, {C}] (got {tuple(out.shape)})")
    args.out, args.out_dtype = _p(out), _dtype(out, "out")
    with torch.cuda.device(dev):
        _check(lib().sg_conv_fwd(ctypes.byref(args), _arm(arm), _arm(chunks_arm), _stream(dev)))
    del keep  # freed after the call; the caching allocator orders the reuse on this stream
    return out
