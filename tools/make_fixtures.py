#!/usr/bin/env python3
"""make_fixtures.py: tiny random Qwen3.5 text models in Hugging Face transformers, and what HF
computes for them, for stepgraph's CPU reference model (tests/cpu/test_reference_model.cpp) and,
later, the GPU model step.

Runs on the GPU machine (Python 3.12, torch, transformers with transformers.models.qwen3_5; no
network needed), on the CPU, in float32, eval mode:

    PYTHONUNBUFFERED=1 python3 tools/make_fixtures.py --out tests/fixtures

For every model spec below it writes tests/fixtures/<name>/:
    config.json, model.safetensors   save_pretrained (the files stepgraph loads)
    reference.json                   what was recorded (format below)
    logits_<L>.bin                   raw little-endian float32, row-major [L, vocab]: the logits of
                                     every position of the length-L prompt
reference.json:
    {"format": "stepgraph-hf-fixture-1", "name", "vocab_size", "seed", "spec", "versions",
     "delta_rule": which HF functions ran, "prompts": [
        {"length": L, "tokens": [...], "logits_file": "logits_<L>.bin", "logits_shape": [L, V],
         "greedy": [12 token ids], "greedy_margins": [top-1 minus top-2 logit at each step],
         "max_abs_logit": ...}, ...]}

Weights: HF's own init (std 0.02) makes near-uniform logits, so greedy tokens would hang on
near-ties. Every parameter is re-initialised here from a seeded torch.Generator with the same
scheme as stepgraph's synthetic_weights (models/reference_model.h):
    embed_tokens U(-1, 1); linear [out, in] U(-a, a), a = sqrt(3 / in); conv1d [C, 1, K]
    U(-a, a), a = sqrt(3 / K); zero-centred norms (input/post-attention/final, q_norm, k_norm)
    U(-0.1, 0.1); GDN norm.weight 1 + U(-0.1, 0.1); A_log log(U(1, 16)); dt_bias U(-0.5, 0.5).

Logits come from a use_cache=False forward of the whole prompt (HF's prefill path: the chunked
delta rule in plain PyTorch). Greedy tokens come from repeated use_cache=False forwards of the
growing sequence (argmax of the last position, ties -> lowest id), not generate(), so HF's cache
path plays no part; generate() is run afterwards only as an informational cross-check.
"""

import argparse
import json
import math
import os
import shutil
import struct
import sys
import time

PROMPT_LENGTHS = [1, 3, 7, 19, 64, 65]
GREEDY_STEPS = 12
FORMAT = "stepgraph-hf-fixture-1"

# Each spec: a tiny model. All have >= 2 full-attention layers and vocab ~512.
SPECS = [
    dict(name="h72-hv2x-dk16-dv24", vocab=512, hidden=72, intermediate=64,
         layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
         heads=4, kv_heads=2, head_dim=16, partial_rotary_factor=0.25, rope_theta=10000.0,
         lin_k_heads=2, lin_v_heads=4, lin_k_dim=16, lin_v_dim=24, conv_kernel=4, tied=False),
    dict(name="h48-tied-hv3x-dk32-dv16", vocab=512, hidden=48, intermediate=80,
         layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention",
                      "full_attention"],
         heads=6, kv_heads=2, head_dim=16, partial_rotary_factor=0.5, rope_theta=10000000.0,
         lin_k_heads=1, lin_v_heads=3, lin_k_dim=32, lin_v_dim=16, conv_kernel=4, tied=True),
    dict(name="h40-attn-first-v500", vocab=500, hidden=40, intermediate=72,
         layer_types=["full_attention", "linear_attention", "full_attention", "linear_attention"],
         heads=2, kv_heads=1, head_dim=24, partial_rotary_factor=0.25, rope_theta=1000000.0,
         lin_k_heads=2, lin_v_heads=2, lin_k_dim=8, lin_v_dim=8, conv_kernel=4, tied=False),
    # The real models' head sizes (Dk = Dv = 128, head_dim 256, rotary dim 64) on a tiny body.
    dict(name="h32-real-head-dims", vocab=512, hidden=32, intermediate=64,
         layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
         heads=2, kv_heads=1, head_dim=256, partial_rotary_factor=0.25, rope_theta=10000000.0,
         lin_k_heads=1, lin_v_heads=2, lin_k_dim=128, lin_v_dim=128, conv_kernel=4, tied=True),
]


def log(msg=""):
    print(msg, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="tests/fixtures", help="output folder (default tests/fixtures)")
    p.add_argument("--seed", type=int, default=1234, help="base seed (weights and prompts)")
    p.add_argument("--only", nargs="*", default=None, help="names of the specs to build (default: all)")
    p.add_argument("--threads", type=int, default=4, help="torch CPU threads")
    return p.parse_args()


def import_hf():
    import torch
    import transformers
    try:
        from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    except ImportError:
        from transformers.models.qwen3_5 import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    return torch, transformers, Qwen3_5ForCausalLM, Qwen3_5TextConfig


def config_kwargs(spec):
    return dict(
        vocab_size=spec["vocab"],
        hidden_size=spec["hidden"],
        intermediate_size=spec["intermediate"],
        num_hidden_layers=len(spec["layer_types"]),
        num_attention_heads=spec["heads"],
        num_key_value_heads=spec["kv_heads"],
        head_dim=spec["head_dim"],
        linear_num_key_heads=spec["lin_k_heads"],
        linear_num_value_heads=spec["lin_v_heads"],
        linear_key_head_dim=spec["lin_k_dim"],
        linear_value_head_dim=spec["lin_v_dim"],
        linear_conv_kernel_dim=spec["conv_kernel"],
        layer_types=list(spec["layer_types"]),
        rms_norm_eps=1e-6,
        hidden_act="silu",
        max_position_embeddings=1024,
        tie_word_embeddings=spec["tied"],
    )


def expected_inv_freq(torch, spec):
    dim = int(spec["head_dim"] * spec["partial_rotary_factor"])
    return 1.0 / (spec["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))


def build_model(torch, Model, Config, spec):
    """Tries the ways transformers versions accept rope settings; keeps the first whose built model
    really has the requested rotary dim and theta (checked on the rotary embedding's inv_freq)."""
    theta, prf = spec["rope_theta"], spec["partial_rotary_factor"]
    attempts = [
        ("rope_parameters with partial_rotary_factor",
         dict(rope_parameters={"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": prf})),
        ("rope_parameters + top-level partial_rotary_factor",
         dict(rope_parameters={"rope_type": "default", "rope_theta": theta}, partial_rotary_factor=prf)),
        ("legacy top-level rope_theta / partial_rotary_factor", dict(rope_theta=theta, partial_rotary_factor=prf)),
    ]
    want = expected_inv_freq(torch, spec)
    errors = []
    for label, extra in attempts:
        try:
            cfg = Config(**config_kwargs(spec), **extra)
        except Exception as e:  # noqa: BLE001 - any rejection: try the next form
            errors.append(f"{label}: config rejected: {type(e).__name__}: {e}")
            continue
        try:
            cfg._attn_implementation = "eager"
        except Exception as e:  # noqa: BLE001
            log(f"  note: could not set eager attention on the config ({e})")
        torch.manual_seed(0)
        try:
            model = Model(cfg)
        except Exception as e:  # noqa: BLE001
            errors.append(f"{label}: model construction failed: {type(e).__name__}: {e}")
            continue
        inv = getattr(getattr(model.model, "rotary_emb", None), "inv_freq", None)
        if inv is None:
            errors.append(f"{label}: model.model.rotary_emb.inv_freq not found")
            continue
        inv = inv.detach().float().cpu()
        if inv.shape != want.shape or not torch.allclose(inv, want, rtol=1e-6, atol=0):
            errors.append(f"{label}: inv_freq {tuple(inv.shape)} {inv[:3].tolist()} != wanted "
                          f"{tuple(want.shape)} {want[:3].tolist()}")
            continue
        if list(getattr(cfg, "layer_types", [])) != list(spec["layer_types"]):
            errors.append(f"{label}: layer_types became {getattr(cfg, 'layer_types', None)}")
            continue
        log(f"  config form used: {label}")
        return cfg, model
    raise SystemExit("could not build a config with the requested rope settings:\n  " + "\n  ".join(errors))


def reinit(torch, model, spec, seed):
    g = torch.Generator().manual_seed(seed)

    def uni(shape, lo, hi):
        return torch.rand(shape, generator=g, dtype=torch.float32) * (hi - lo) + lo

    seen = []
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith("embed_tokens.weight"):
                v = uni(p.shape, -1.0, 1.0)
            elif name.endswith("conv1d.weight"):
                a = math.sqrt(3.0 / p.shape[-1])
                v = uni(p.shape, -a, a)
            elif name.endswith("linear_attn.norm.weight"):
                v = 1.0 + uni(p.shape, -0.1, 0.1)
            elif name.endswith("A_log"):
                v = torch.log(uni(p.shape, 1.0, 16.0))
            elif name.endswith("dt_bias"):
                v = uni(p.shape, -0.5, 0.5)
            elif name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                v = uni(p.shape, -0.1, 0.1)  # zero-centred RMSNorm: scale 1 + w
            elif p.dim() == 2 and name.endswith(".weight"):
                a = math.sqrt(3.0 / p.shape[1])
                v = uni(p.shape, -a, a)
            else:
                raise SystemExit(f"reinit: no rule for parameter {name} {tuple(p.shape)}")
            p.copy_(v)
            seen.append((name, tuple(p.shape)))
    return seen


def describe_gdn_functions(model):
    """Which conv / delta-rule functions the GDN layers will call (for the record)."""
    out = {}
    for _, mod in model.named_modules():
        if type(mod).__name__.endswith("GatedDeltaNet"):
            for attr in sorted(dir(mod)):
                if any(s in attr for s in ("delta_rule", "conv1d_fn", "conv1d_update")):
                    fn = getattr(mod, attr, None)
                    if callable(fn):
                        out[attr] = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__name__', repr(fn))}"
            break
    try:
        from transformers.utils import is_flash_linear_attention_available
        out["fla_available"] = bool(is_flash_linear_attention_available())
    except Exception:  # noqa: BLE001
        pass
    try:
        from transformers.utils import is_causal_conv1d_available
        out["causal_conv1d_available"] = bool(is_causal_conv1d_available())
    except Exception:  # noqa: BLE001
        pass
    return out


def forward_logits(torch, model, tokens):
    ids = torch.tensor([tokens], dtype=torch.long)
    with torch.no_grad():
        try:
            out = model(input_ids=ids, use_cache=False)
        except TypeError:
            out = model(input_ids=ids)
    return out.logits[0].detach().float().cpu()


def greedy(torch, model, tokens, steps):
    seq = list(tokens)
    picked, margins = [], []
    for _ in range(steps):
        last = forward_logits(torch, model, seq)[-1]
        nxt = int(torch.argmax(last).item())  # first index of the maximum
        top2 = torch.topk(last, 2).values
        picked.append(nxt)
        margins.append(float(top2[0] - top2[1]))
        seq.append(nxt)
    return picked, margins


def hf_generate_check(torch, model, tokens, steps):
    try:
        ids = torch.tensor([tokens], dtype=torch.long)
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=steps, do_sample=False, num_beams=1,
                                 attention_mask=torch.ones_like(ids), pad_token_id=0)
        return [int(t) for t in out[0, len(tokens):].tolist()]
    except Exception as e:  # noqa: BLE001 - informational only
        return f"generate() failed: {type(e).__name__}: {e}"


def save(model, out_dir):
    try:
        model.save_pretrained(out_dir, safe_serialization=True)
    except TypeError:
        model.save_pretrained(out_dir)


def safetensors_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def effective_rope_from_json(cfg_json):
    """What stepgraph's parser (models/hf_config.h) will read from config.json."""
    text = cfg_json.get("text_config", cfg_json)
    rp = text.get("rope_parameters") or {}
    theta = rp.get("rope_theta", (text.get("rope_scaling") or {}).get("rope_theta", text.get("rope_theta")))
    prf = rp.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25))
    tied = text.get("tie_word_embeddings", cfg_json.get("tie_word_embeddings", False))
    return theta, prf, tied, text.get("layer_types"), text.get("head_dim")


def load_back(Model, torch, out_dir):
    for kw in (dict(dtype=torch.float32, attn_implementation="eager"),
               dict(torch_dtype=torch.float32, attn_implementation="eager"), dict()):
        try:
            return Model.from_pretrained(out_dir, **kw).eval()
        except TypeError:
            continue
    raise SystemExit(f"could not reload {out_dir}")


def build_fixture(torch, transformers, Model, Config, spec, index, args):
    name = spec["name"]
    out_dir = os.path.join(args.out, name)
    log(f"== {name}")
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    cfg, model = build_model(torch, Model, Config, spec)
    seed = args.seed + 1000 * index
    params = reinit(torch, model, spec, seed)
    model = model.float().eval()
    if spec["tied"]:
        head, emb = model.get_output_embeddings().weight, model.get_input_embeddings().weight
        if head.data_ptr() != emb.data_ptr():
            log("  note: lm_head was not tied to embed_tokens after construction: calling tie_weights()")
            model.tie_weights()
            head = model.get_output_embeddings().weight
            if head.data_ptr() != emb.data_ptr():
                raise SystemExit(f"{name}: tie_word_embeddings=True but lm_head is not the embedding matrix")
    log(f"  attention implementation: {getattr(model.config, '_attn_implementation', '?')}")
    nparams = sum(p.numel() for p in model.parameters())
    log(f"  parameters: {nparams} ({len(params)} tensors), weight seed {seed}")
    fns = describe_gdn_functions(model)
    log(f"  GDN functions: {fns}")

    save(model, out_dir)
    st_path = os.path.join(out_dir, "model.safetensors")
    if not os.path.exists(st_path):
        raise SystemExit(f"{out_dir}: save_pretrained wrote no single model.safetensors: {sorted(os.listdir(out_dir))}")
    header = safetensors_header(st_path)
    names = sorted(k for k in header if k != "__metadata__")
    dtypes = sorted({header[k]["dtype"] for k in names})
    log(f"  model.safetensors: {os.path.getsize(st_path)} bytes, {len(names)} tensors, dtypes {dtypes}")
    log(f"  tensor names: {names[:4]} ... {names[-3:]}")
    if any(k.startswith("model.language_model.") for k in names):
        log("  note: names carry the multimodal prefix model.language_model. (stepgraph maps it to model.)")
    if dtypes != ["F32"]:
        raise SystemExit(f"{name}: expected only F32 tensors, got {dtypes}")
    has_head = "lm_head.weight" in names
    log(f"  lm_head.weight stored: {has_head} (tie_word_embeddings={spec['tied']})")
    if os.path.getsize(st_path) > 1_200_000:
        log("  WARNING: model.safetensors is over ~1 MB")

    with open(os.path.join(out_dir, "config.json")) as f:
        cfg_json = json.load(f)
    theta, prf, tied, layer_types, head_dim = effective_rope_from_json(cfg_json)
    log(f"  config.json as stepgraph reads it: rope_theta={theta} partial_rotary_factor={prf} "
        f"tie_word_embeddings={tied} head_dim={head_dim} layer_types={layer_types}")
    problems = []
    if theta is None or abs(float(theta) - spec["rope_theta"]) > 1e-6 * spec["rope_theta"]:
        problems.append(f"rope_theta {theta} != {spec['rope_theta']}")
    if abs(float(prf) - spec["partial_rotary_factor"]) > 1e-12:
        problems.append(f"partial_rotary_factor {prf} != {spec['partial_rotary_factor']}")
    if bool(tied) != spec["tied"]:
        problems.append(f"tie_word_embeddings {tied} != {spec['tied']}")
    if layer_types is not None and list(layer_types) != spec["layer_types"]:
        problems.append(f"layer_types {layer_types} != {spec['layer_types']}")
    if head_dim != spec["head_dim"]:
        problems.append(f"head_dim {head_dim} != {spec['head_dim']}")
    if problems:
        raise SystemExit(f"{name}: config.json does not say what the model computes: " + "; ".join(problems))
    log("  config.json (full):")
    log("    " + json.dumps(cfg_json, sort_keys=True))

    # Reload from disk and compare: the saved files must reproduce the in-memory model exactly.
    # (Exact equality is expected; a tiny tolerance covers a reload that picks another attention
    # implementation. A naming or tying problem gives O(1) differences.)
    reloaded = load_back(Model, torch, out_dir)
    log(f"  reloaded: attention implementation {getattr(reloaded.config, '_attn_implementation', '?')}")
    probe = list(range(1, min(spec["vocab"], 40)))
    a, b = forward_logits(torch, model, probe), forward_logits(torch, reloaded, probe)
    diff = (a - b).abs().max().item()
    log(f"  reload check: max |logits(saved) - logits(in memory)| = {diff}")
    if not diff <= 1e-5 * max(1.0, a.abs().max().item()):
        raise SystemExit(f"{name}: the saved model does not reproduce the in-memory model (diff {diff})")

    prompts = []
    for L in PROMPT_LENGTHS:
        g = torch.Generator().manual_seed(args.seed + 7919 * index + L)
        tokens = [int(t) for t in torch.randint(0, spec["vocab"], (L,), generator=g).tolist()]
        t0 = time.time()
        logits = forward_logits(torch, model, tokens)
        assert tuple(logits.shape) == (L, spec["vocab"]), logits.shape
        if not torch.isfinite(logits).all():
            raise SystemExit(f"{name}: non-finite logits for the length-{L} prompt")
        fname = f"logits_{L}.bin"
        logits.contiguous().numpy().astype("<f4").tofile(os.path.join(out_dir, fname))
        picked, margins = greedy(torch, model, tokens, GREEDY_STEPS)
        # The first greedy step recomputes the last row of `logits`: they must agree.
        if picked[0] != int(torch.argmax(logits[-1]).item()):
            raise SystemExit(f"{name}: greedy step 0 disagrees with the prompt's last logits")
        gen = hf_generate_check(torch, model, tokens, GREEDY_STEPS)
        gen_note = "same" if gen == picked else f"DIFFERS: {gen}"
        log(f"  prompt L={L:>2}: max|logit| {logits.abs().max().item():.3f}, greedy {picked}, "
            f"min margin {min(margins):.4f}, HF generate() with cache: {gen_note} ({time.time() - t0:.1f} s)")
        prompts.append(dict(length=L, tokens=tokens, logits_file=fname, logits_shape=[L, spec["vocab"]],
                            greedy=picked, greedy_margins=[round(m, 6) for m in margins],
                            max_abs_logit=float(logits.abs().max().item()),
                            hf_generate_with_cache=gen if isinstance(gen, list) else str(gen)))

    ref = dict(format=FORMAT, name=name, vocab_size=spec["vocab"], seed=seed, spec=spec,
               versions=dict(torch=torch.__version__, transformers=transformers.__version__,
                             python=sys.version.split()[0]),
               dtype="float32", device="cpu", attn_implementation="eager",
               logits_source="model(input_ids, use_cache=False).logits[0] (every position)",
               greedy_source="argmax of the last position of repeated use_cache=False forwards",
               gdn_functions=fns, prompts=prompts)
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    total = sum(os.path.getsize(os.path.join(out_dir, x)) for x in os.listdir(out_dir))
    log(f"  wrote {out_dir}: {sorted(os.listdir(out_dir))}, {total} bytes")
    return dict(name=name, params=nparams, bytes=total, tied=spec["tied"],
                margins=min(min(p["greedy_margins"]) for p in prompts))


def main():
    args = parse_args()
    torch, transformers, Model, Config = import_hf()
    torch.set_num_threads(max(1, args.threads))
    torch.use_deterministic_algorithms(True, warn_only=True)
    log(f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__}")
    log(f"output: {os.path.abspath(args.out)}")
    os.makedirs(args.out, exist_ok=True)
    specs = [s for s in SPECS if args.only is None or s["name"] in args.only]
    if not specs:
        raise SystemExit(f"--only matched nothing (names: {[s['name'] for s in SPECS]})")
    summary = []
    for i, spec in enumerate(SPECS):
        if spec in specs:
            summary.append(build_fixture(torch, transformers, Model, Config, spec, i, args))
    log("")
    log("summary:")
    for s in summary:
        log(f"  {s['name']:<28} {s['params']:>8} params  {s['bytes']:>9} bytes on disk  tied={s['tied']!s:<5} "
            f"smallest greedy margin {s['margins']:.4f}")
    log(f"{len(summary)} fixture(s) in {os.path.abspath(args.out)}; prompt lengths {PROMPT_LENGTHS}, "
        f"{GREEDY_STEPS} greedy tokens each")


if __name__ == "__main__":
    main()
