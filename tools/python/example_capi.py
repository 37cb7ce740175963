#!/usr/bin/env python3
"""example_capi.py: stepgraph's C interface from PyTorch (docs/C-API.md). On a CUDA machine with
libstepgraph_c.so built: random inputs on the GPU, every arm of conv.update, postconv and conv.fwd
called through ctypes (tools/python/stepgraph_ctypes.py) on the tensors' data pointers, each
checked against a plain PyTorch float32 implementation of docs/MODEL.md (steps 2 and 3), and every
arm's output bytes against the op's reference arm. Also a conv.fwd captured into a CUDA graph with
device metadata, replayed. Prints one table row per run and exits 1 on any mismatch.

    python3 tools/python/example_capi.py            # library from build-gpu/, build/ or $STEPGRAPH_LIB
"""
import argparse
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import stepgraph_ctypes as sg  # noqa: E402

# Tolerances (STYLE.md: atol + rtol * |ref| against the reference rounded to the output dtype).
# f32: different summation order and expf/log1pf ulps; bf16: one rounding step either side.
TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1e-5, 2.0**-7)}
NAME = {torch.float32: "f32", torch.bfloat16: "bf16"}


# --- plain PyTorch float32 references (docs/MODEL.md) ----------------------------------------------

def silu(x):
    return x / (1 + torch.exp(-x))


def ref_conv_update(x, state, w, bias, slots, act):
    """x [rows, C], state [S, C, K-1], w [C, K], all f32 on the CPU. Returns out, new state."""
    out = torch.zeros_like(x)
    new_state = state.clone()
    for r in range(x.shape[0]):
        s = int(slots[r])
        if s < 0:
            continue  # padding row: zero output, state untouched
        taps = torch.cat([state[s], x[r, :, None]], dim=1)  # [C, K], tap 0 oldest
        acc = (taps * w).sum(1) + (bias if bias is not None else 0)
        out[r] = silu(acc) if act else acc
        new_state[s] = taps[:, 1:]  # roll by one, append the raw input
    return out, new_state


def ref_postconv(conv, a, b, A_log, dt_bias, Hk, Hv, Dk, Dv):
    T = conv.shape[0]
    q = conv[:, : Hk * Dk].reshape(T, Hk, Dk)
    k = conv[:, Hk * Dk: 2 * Hk * Dk].reshape(T, Hk, Dk)
    v = conv[:, 2 * Hk * Dk: 2 * Hk * Dk + Hv * Dv].reshape(T, Hv, Dv)

    def l2(x):
        return x * (1.0 / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6))

    y = a[:, :Hv] + dt_bias
    softplus = torch.where(y > 20, y, torch.log1p(torch.exp(y)))
    g = -torch.exp(A_log) * softplus
    beta = 1 / (1 + torch.exp(-b[:, :Hv]))
    return l2(q), l2(k), v.clone(), g, beta


def ref_conv_fwd(x, state, w, bias, cu, slots, hist, act):
    """x [T, C], state [S, C, K-1], w [C, K] f32 on the CPU; cu, slots, hist lists."""
    C, K = w.shape
    out = torch.zeros(cu[-1], C)
    new_state = state.clone()
    for n in range(len(cu) - 1):
        b, e, s = cu[n], cu[n + 1], slots[n]
        if s < 0 or e == b:
            continue  # padding: zero rows, no state; empty: state as it was
        h = state[s].T if hist[n] else torch.zeros(K - 1, C)  # [K-1, C], oldest first
        xs = torch.cat([h, x[b:e]])  # [K-1+L, C]
        win = xs.unfold(0, K, 1)  # [L, C, K]: tap j of token t reads xs[t + j]
        acc = (win * w).sum(-1) + (bias if bias is not None else 0)
        out[b:e] = silu(acc) if act else acc
        new_state[s] = xs[-(K - 1):].T  # the last K-1 raw inputs
    return out, new_state


# --- checks ----------------------------------------------------------------------------------------

class Report:
    def __init__(self):
        self.rows, self.failed = [], 0

    def add(self, op, arm, dtypes, shape, err, ok_vals, ok_state, same_bytes, ran):
        ok = ok_vals and ok_state and same_bytes is not False
        self.failed += not ok
        self.rows.append((op, arm, dtypes, shape, f"{err:.2e}", "exact" if ok_state else "DIFF",
                          {True: "yes", False: "NO", None: "(ref)"}[same_bytes], "ok" if ok else "FAIL", ran))

    def print(self):
        head = ("op", "arm", "dtypes x/out/state", "shape", "max err/tol", "state", "= ref bytes", "check", "kernel ran")
        w = [max(len(str(r[i])) for r in self.rows + [head]) for i in range(len(head))]
        for r in [head] + self.rows:
            print("  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)).rstrip())


def close(got, ref, dtype):
    """(worst |got - ref| / (atol + rtol*|ref|), ok): ref in f32, rounded to dtype first."""
    atol, rtol = TOL[dtype]
    ref = ref.to(dtype).float()
    ratio = ((got.float().cpu() - ref).abs() / (atol + rtol * ref.abs())).max().item() if ref.numel() else 0.0
    return ratio, ratio <= 1.0


def bits(t):
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32).cpu()


def same_bits(a, b):
    return all(torch.equal(bits(x), bits(y)) for x, y in zip(a, b))


def kernel_of(launch):
    part = launch.split(" kernel ")[1] if " kernel " in launch else "?"
    return part.split(" grid ")[0] + (" (fallback)" if "(requested" in launch else "")


def rand(shape, dtype, dev, gen, lo=-2.0, hi=2.0):
    return (torch.rand(shape, generator=gen, device="cpu") * (hi - lo) + lo).to(dtype).to(dev)


# --- the ops ---------------------------------------------------------------------------------------

def run_conv_update(rep, dev, gen, dt_x, dt_out, dt_state):
    rows, C, K, S = 6, 8192, 4, 16
    x_full = rand((rows, C + 64), dt_x, dev, gen)
    x = x_full[:, :C]  # a view read through its row stride
    w = rand((C, K), torch.float32, dev, gen, -1, 1)
    bias = rand((C,), torch.float32, dev, gen, -0.5, 0.5)
    state0 = rand((S, C, K - 1), dt_state, dev, gen)
    slots = torch.tensor([3, -1, 0, 15, 7, 9], dtype=torch.int32, device=dev)
    ref_out, ref_state = ref_conv_update(x.float().cpu(), state0.float().cpu(), w.cpu(), bias.cpu(), slots.cpu(), True)
    first = None
    for arm in ("grid", "fast"):
        state = state0.clone()
        out = sg.conv_update(x, state, w, slots, bias=bias, arm=arm, out_dtype=dt_out)
        ran = kernel_of(sg.last_launch())
        torch.cuda.synchronize()
        err, ok = close(out, ref_out, dt_out)
        ok_state = torch.equal(bits(state), bits(ref_state.to(dt_state)))
        same = None if first is None else same_bits((out, state), first)
        first = first or (out, state)
        rep.add("conv.update", arm, f"{NAME[dt_x]}/{NAME[dt_out]}/{NAME[dt_state]}", f"rows={rows} C={C} K={K}",
                err, ok, ok_state, same, ran)


def run_postconv(rep, dev, gen, dt_conv, dt_qkv):
    T, Hk, Hv, Dk, Dv = 37, 16, 32, 128, 128
    C = 2 * Hk * Dk + Hv * Dv
    conv = rand((T, C + 32), dt_conv, dev, gen)[:, :C]
    ab = rand((T, 2 * Hv + 8), dt_conv, dev, gen, -3, 3)
    a, b = ab[:, :Hv], ab[:, Hv: 2 * Hv]  # strided views, as a fused projection would give
    A_log = rand((Hv,), torch.float32, dev, gen, -1, 1)
    dt_bias = rand((Hv,), torch.float32, dev, gen, -1, 1)
    refs = ref_postconv(conv.float().cpu(), a.float().cpu(), b.float().cpu(), A_log.cpu(), dt_bias.cpu(), Hk, Hv, Dk, Dv)
    first = None
    for arm in ("megablock", "fast", "split", "token_tile"):
        outs = sg.postconv(conv, a, b, A_log, dt_bias, Hk, Hv, Dk, Dv, arm=arm, qkv_dtype=dt_qkv)
        ran = kernel_of(sg.last_launch())
        torch.cuda.synchronize()
        worst, ok = 0.0, True
        for got, ref, dt in zip(outs, refs, (dt_qkv, dt_qkv, dt_qkv, torch.float32, torch.float32)):
            e, o = close(got, ref, dt)
            worst, ok = max(worst, e), ok and o
        ok_v = torch.equal(bits(outs[2]), bits(refs[2].to(dt_qkv)))  # v is a copy
        same = None if first is None else same_bits(outs, first)
        first = first or outs
        rep.add("postconv", arm, f"{NAME[dt_conv]}/{NAME[dt_qkv]}/-", f"T={T} Hk={Hk} Hv={Hv} D={Dk}",
                worst, ok, ok_v, same, ran)


LENS = [33, 0, 37, 1, 2, 9]
SLOTS = [3, 5, -1, 0, 6, 2]
HIST = [1, 1, 1, 0, 1, 0]


def fwd_inputs(dev, gen, dt_x, dt_state, C=8192, K=4, S=8):
    cu = [0]
    for n in LENS:
        cu.append(cu[-1] + n)
    T = cu[-1]
    x = rand((T, C + 16), dt_x, dev, gen)[:, :C]
    w = rand((C, K), torch.float32, dev, gen, -1, 1)
    bias = rand((C,), torch.float32, dev, gen, -0.5, 0.5)
    state0 = rand((S, C, K - 1), dt_state, dev, gen)
    return cu, T, x, w, bias, state0


def run_conv_fwd(rep, dev, gen, dt_x, dt_out, dt_state):
    C, K = 8192, 4
    cu, T, x, w, bias, state0 = fwd_inputs(dev, gen, dt_x, dt_state, C, K)
    cu_t = torch.tensor(cu, dtype=torch.int32, device=dev)
    slots = torch.tensor(SLOTS, dtype=torch.int32, device=dev)
    hist = torch.tensor(HIST, dtype=torch.uint8, device=dev)
    ref_out, ref_state = ref_conv_fwd(x.float().cpu(), state0.float().cpu(), w.cpu(), bias.cpu(), cu, SLOTS, HIST, True)
    first = None
    arms = ["tiled"] if dt_x != dt_out else ["tiled", "register", "k4", "k4x2"]
    for arm in arms:
        for split in ("exact", "whole"):
            state = state0.clone()
            out = sg.conv_fwd(x, state, w, cu_t, slots, hist, bias=bias, arm=arm, chunks_arm=split, out_dtype=dt_out)
            ran = kernel_of(sg.last_launch())
            torch.cuda.synchronize()
            err, ok = close(out, ref_out, dt_out)
            ok_state = torch.equal(bits(state), bits(ref_state.to(dt_state)))
            same = None if first is None else same_bits((out, state), first)
            first = first or (out, state)
            rep.add("conv.fwd", f"{arm}/{split}", f"{NAME[dt_x]}/{NAME[dt_out]}/{NAME[dt_state]}",
                    f"T={T} N={len(LENS)} C={C} K={K}", err, ok, ok_state, same, ran)


def run_conv_fwd_graph(rep, dev, gen):
    """conv.fwd with device metadata captured into a CUDA graph; the host-metadata form is refused
    inside the capture; the replay equals an eager call and the reference."""
    C, K = 8192, 4
    cu, T, x, w, bias, state0 = fwd_inputs(dev, gen, torch.bfloat16, torch.bfloat16, C, K)
    N = len(LENS)
    max_tokens, max_seqs = T + 40, N + 3  # a bucket larger than the batch
    pad = max_seqs - N
    cu_t = torch.tensor(cu + [T] * pad, dtype=torch.int32, device=dev)  # [max_seqs + 1]
    slots = torch.tensor(SLOTS + [-1] * pad, dtype=torch.int32, device=dev)
    hist = torch.tensor(HIST + [0] * pad, dtype=torch.uint8, device=dev)
    meta = sg.conv_fwd_device_meta(cu, max_tokens, max_seqs, dev)
    out_e = torch.zeros(max_tokens, C, dtype=torch.bfloat16, device=dev)
    out_g = torch.zeros_like(out_e)
    state_e, state_g = state0.clone(), state0.clone()
    sg.conv_fwd(x, state_e, w, cu_t, slots, hist, bias=bias, arm="register", chunks_arm="exact", out=out_e, meta=meta)
    torch.cuda.synchronize()
    refused = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        try:
            sg.conv_fwd(x, state_g, w, cu_t, slots, hist, bias=bias, arm="register", chunks_arm="exact")
        except sg.StepgraphError as e:
            refused = e.status
        sg.conv_fwd(x, state_g, w, cu_t, slots, hist, bias=bias, arm="register", chunks_arm="exact", out=out_g,
                    meta=meta)
    graph.replay()  # capture recorded the launch; the replay runs it
    torch.cuda.synchronize()
    ref_out, ref_state = ref_conv_fwd(x.float().cpu(), state0.float().cpu(), w.cpu(), bias.cpu(), cu, SLOTS, HIST, True)
    err, ok = close(out_g[:T], ref_out, torch.bfloat16)
    ok_state = torch.equal(bits(state_g), bits(ref_state.to(torch.bfloat16)))
    same = same_bits((out_g, state_g), (out_e, state_e))
    ok = ok and refused == "SG_ERR_CAPTURE"
    rep.add("conv.fwd", "register/exact graph", "bf16/bf16/bf16", f"bucket {max_tokens}x{max_seqs}", err, ok,
            ok_state, same, f"replay (host meta refused: {refused})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("example_capi: no CUDA device")
        return 2
    dev = torch.device(args.device)
    gen = torch.Generator().manual_seed(args.seed)
    lib = sg.lib()
    print(f"libstepgraph_c: {lib._name} (C API version {sg.version()}), {torch.cuda.get_device_name(dev)}, "
          f"torch {torch.__version__}, seed {args.seed}")
    print(sg.arms())
    rep = Report()
    bf, f32 = torch.bfloat16, torch.float32
    for dts in ((bf, bf, bf), (f32, f32, f32), (bf, f32, f32)):
        run_conv_update(rep, dev, gen, *dts)
    for dts in ((bf, bf), (f32, f32), (bf, f32)):
        run_postconv(rep, dev, gen, *dts)
    for dts in ((bf, bf, bf), (f32, f32, bf), (bf, f32, f32)):
        run_conv_fwd(rep, dev, gen, *dts)
    run_conv_fwd_graph(rep, dev, gen)
    # An argument error comes back as an exception with the library's message.
    try:
        sg.conv_update(torch.zeros(1, 8, device=dev), torch.zeros(1, 8, 3, device=dev), torch.zeros(8, 4), torch.zeros(1),
                       arm="fastest")
        print("expected an error for arm 'fastest'")
        rep.failed += 1
    except sg.StepgraphError as e:
        print(f"error path: {e}")
        rep.failed += e.status != "SG_ERR_ARM"
    print()
    rep.print()
    print(f"\n{len(rep.rows)} runs, {rep.failed} failed")
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
