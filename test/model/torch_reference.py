#!/usr/bin/python3
"""Independent PyTorch reference for longhaul's GPT-2 (run with Debian's /usr/bin/python3).

Builds a small GPT-2 exactly as llm.c defines it (pre-layernorm, eps 1e-5, tanh GELU,
causal attention scaled by 1/sqrt(head size), learned positions, tied head, weights
(out, in), vocabulary padded to Vp with zero rows) from random weights, and writes to --out:

  model.bin     llm.c checkpoint (header of 256 int32, fp32 params in the 16-tensor order)
  tokens.bin    llm.c token file with B*T+1 tokens: sequence b is tokens[b*T : b*T+T+1]
  logits.f32    (B, T, Vp) logits
  loss.f32      mean cross-entropy over the first V logits
  grads.f32     gradient of the loss, llm.c layout (wte: head + embedding, tied)
  gradnorm.f32  global gradient norm
  stepped.f32   parameters after one AdamW step (torch.optim.AdamW) on these gradients,
                clipped to --grad-clip by global norm (scale clip/norm when norm > clip),
                weight decay only on wte, wpe, qkvw, attprojw, fcw, fcprojw.

With --check-hf DIR it instead checks a Hugging Face GPT-2 directory (as our exporter writes
it) against a normal run already in --out: reads DIR/config.json and DIR/model.safetensors
or the shards in DIR/model.safetensors.index.json (safetensors parsed by hand: F32, BF16,
F16), computes logits as transformers' GPT2LMHeadModel does (HF names, Conv1D weights
(in, out): y = x @ W + b, head tied to transformer.wte.weight) on the first B*T tokens of
--out/tokens.bin laid out for --batch/--seq-len, compares them with the first V entries of
each row of --out/logits.f32, prints the max abs difference, writes it to
--out/hf_check.txt and exits 1 when it exceeds --tol.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


def make_params(L, C, V, Vp, maxT, gen):
    def normal(*shape, std):
        return torch.randn(*shape, generator=gen, dtype=torch.float32) * std

    wte = normal(Vp, C, std=0.3)
    wte[V:] = 0.0  # padded rows are zero, as in llm.c
    p = {
        "wte": wte, "wpe": normal(maxT, C, std=0.1),
        "ln1w": 1.0 + normal(L, C, std=0.1), "ln1b": normal(L, C, std=0.05),
        "qkvw": normal(L, 3 * C, C, std=0.1), "qkvb": normal(L, 3 * C, std=0.05),
        "attprojw": normal(L, C, C, std=0.1), "attprojb": normal(L, C, std=0.05),
        "ln2w": 1.0 + normal(L, C, std=0.1), "ln2b": normal(L, C, std=0.05),
        "fcw": normal(L, 4 * C, C, std=0.1), "fcb": normal(L, 4 * C, std=0.05),
        "fcprojw": normal(L, C, 4 * C, std=0.1), "fcprojb": normal(L, C, std=0.05),
        "lnfw": 1.0 + normal(C, std=0.1), "lnfb": normal(C, std=0.05),
    }
    return {k: v.clone().requires_grad_(True) for k, v in p.items()}


def forward(p, tokens, L, C, NH, V):
    B, T = tokens.shape
    hs = C // NH
    x = p["wte"][tokens] + p["wpe"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], eps=1e-5)
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + y @ p["attprojw"][l].T + p["attprojb"][l]
        h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], eps=1e-5)
        f = F.gelu(h @ p["fcw"][l].T + p["fcb"][l], approximate="tanh")
        x = x + f @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], eps=1e-5)
    return x @ p["wte"].T  # (B, T, Vp)


def flat(tensors):
    return torch.cat([t.detach().reshape(-1) for t in tensors]).numpy().astype("<f4").tobytes()


# ---- --check-hf: a Hugging Face GPT-2 directory, read and run on its own -----------------

ST_DTYPES = {"F32": ("<f4", 4), "BF16": ("<u2", 2), "F16": ("<f2", 2)}


def read_safetensors(path):
    """{name: (fp32 tensor, dtype string)} from one .safetensors file, parsed by hand."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = memoryview(blob)[8 + n:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, (begin, end) = info["dtype"], list(info["shape"]), info["data_offsets"]
        if dtype not in ST_DTYPES:
            raise ValueError(f"{path}: {name} has unsupported dtype {dtype}")
        np_dtype, size = ST_DTYPES[dtype]
        count = math.prod(shape)
        if not 0 <= begin <= end <= len(data) or end - begin != count * size:
            raise ValueError(f"{path}: {name} {dtype}{shape} has bad data_offsets [{begin}, {end}]"
                             f" (data section is {len(data)} bytes)")
        raw = np.frombuffer(data, dtype=np_dtype, count=count, offset=begin)
        if dtype == "BF16":  # bf16 is the upper 16 bits of an fp32
            arr = (raw.astype("<u4") << 16).view("<f4")
        else:
            arr = raw.astype("<f4")
        tensors[name] = (torch.from_numpy(arr.reshape(shape).copy()), dtype)
    return tensors


def read_hf_dir(d):
    """(config dict, {name: (fp32 tensor, dtype)}) of an HF directory: model.safetensors, else
    the shards of model.safetensors.index.json (the order transformers looks for them)."""
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    single = os.path.join(d, "model.safetensors")
    if os.path.exists(single):
        return cfg, read_safetensors(single)
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        weight_map = json.load(f)["weight_map"]
    tensors = {}
    for shard in sorted(set(weight_map.values())):
        for name, t in read_safetensors(os.path.join(d, shard)).items():
            if name in tensors:
                raise ValueError(f"{name} is in more than one shard")
            if weight_map.get(name) != shard:
                raise ValueError(f"{name} is in {shard}, the index says {weight_map.get(name)}")
            tensors[name] = t
    missing = sorted(set(weight_map) - set(tensors))
    if missing:
        raise ValueError(f"the index lists tensors no shard holds: {missing}")
    return cfg, tensors


def hf_weights(cfg, tensors):
    """The HF-named fp32 tensors GPT2LMHeadModel uses, shapes checked against the config."""
    C, L, V, P = cfg["n_embd"], cfg["n_layer"], cfg["vocab_size"], cfg["n_positions"]
    shapes = {"transformer.wte.weight": [V, C], "transformer.wpe.weight": [P, C],
              "transformer.ln_f.weight": [C], "transformer.ln_f.bias": [C]}
    for l in range(L):
        h = f"transformer.h.{l}."
        shapes.update({
            h + "ln_1.weight": [C], h + "ln_1.bias": [C],
            h + "attn.c_attn.weight": [C, 3 * C], h + "attn.c_attn.bias": [3 * C],
            h + "attn.c_proj.weight": [C, C], h + "attn.c_proj.bias": [C],
            h + "ln_2.weight": [C], h + "ln_2.bias": [C],
            h + "mlp.c_fc.weight": [C, 4 * C], h + "mlp.c_fc.bias": [4 * C],
            h + "mlp.c_proj.weight": [4 * C, C], h + "mlp.c_proj.bias": [C],
        })
    w = {}
    for name, shape in shapes.items():
        if name not in tensors:
            raise ValueError(f"missing tensor {name}")
        t = tensors[name][0]
        if list(t.shape) != shape:
            raise ValueError(f"{name} has shape {list(t.shape)}, the config needs {shape}")
        w[name] = t
    if "lm_head.weight" in tensors:  # optional; GPT-2 ties it to wte
        head = tensors["lm_head.weight"][0]
        if list(head.shape) != [V, C] or not torch.equal(head, w["transformer.wte.weight"]):
            raise ValueError("lm_head.weight is present but is not transformer.wte.weight")
    return w


def check_hf_config(cfg):
    if cfg.get("model_type") != "gpt2":
        raise ValueError(f"model_type is {cfg.get('model_type')!r}, not 'gpt2'")
    unsupported = [
        ("activation_function", "gelu_new", ("gelu_new", "gelu_pytorch_tanh")),
        ("scale_attn_weights", True, (True,)),
        ("scale_attn_by_inverse_layer_idx", False, (False,)),
        ("tie_word_embeddings", True, (True,)),
    ]
    for key, default, allowed in unsupported:
        if cfg.get(key, default) not in allowed:
            raise ValueError(f"config {key}={cfg[key]!r} is not supported (want one of {allowed})")
    if cfg["n_embd"] % cfg["n_head"]:
        raise ValueError(f"n_embd {cfg['n_embd']} is not a multiple of n_head {cfg['n_head']}")


def hf_forward(w, tokens, cfg):
    """(B, T, V) logits as transformers' GPT2LMHeadModel computes them (eval, fp32), from the
    HF-named weights; Conv1D weights are (in, out): y = x @ W + b."""
    B, T = tokens.shape
    C, NH, eps = cfg["n_embd"], cfg["n_head"], cfg.get("layer_norm_epsilon", 1e-5)
    hs = C // NH

    def conv1d(x, prefix):
        return x @ w[prefix + ".weight"] + w[prefix + ".bias"]

    def ln(x, prefix):
        return F.layer_norm(x, (C,), w[prefix + ".weight"], w[prefix + ".bias"], eps=eps)

    def gelu_new(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))

    def heads(x):  # (B, T, C) -> (B, NH, T, hs)
        return x.reshape(B, T, NH, hs).permute(0, 2, 1, 3)

    x = w["transformer.wte.weight"][tokens] + w["transformer.wpe.weight"][torch.arange(T)]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(cfg["n_layer"]):
        h = f"transformer.h.{l}."
        q, k, v = conv1d(ln(x, h + "ln_1"), h + "attn.c_attn").split(C, dim=2)
        q, k, v = heads(q), heads(k), heads(v)
        att = torch.matmul(q, k.transpose(-1, -2)) / (float(hs) ** 0.5)
        att = torch.where(causal, att, torch.tensor(torch.finfo(att.dtype).min))
        y = torch.matmul(att.softmax(dim=-1), v).permute(0, 2, 1, 3).reshape(B, T, C)
        x = x + conv1d(y, h + "attn.c_proj")
        x = x + conv1d(gelu_new(conv1d(ln(x, h + "ln_2"), h + "mlp.c_fc")), h + "mlp.c_proj")
    x = ln(x, "transformer.ln_f")
    return torch.matmul(x, w["transformer.wte.weight"].T)


def check_hf(a):
    out = lambda name: os.path.join(a.out, name)
    B, T = a.batch, a.seq_len
    try:
        cfg, tensors = read_hf_dir(a.check_hf)
        check_hf_config(cfg)
        w = hf_weights(cfg, tensors)
    except (OSError, ValueError, KeyError) as e:
        print(f"torch_reference: --check-hf {a.check_hf}: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 1
    V = cfg["vocab_size"]
    if T > cfg["n_positions"]:
        print(f"torch_reference: --seq-len {T} > n_positions {cfg['n_positions']}",
              file=sys.stderr)
        return 1

    with open(out("tokens.bin"), "rb") as f:
        blob = f.read()
    header = struct.unpack("<256i", blob[:1024])
    stream = np.frombuffer(blob, dtype="<u2", offset=1024).astype(np.int64)
    if header[0] != 20240520 or header[2] != len(stream) or len(stream) < B * T:
        print(f"torch_reference: {out('tokens.bin')} (magic {header[0]}, {header[2]} tokens, "
              f"{len(stream)} in the file) does not hold B*T={B * T} tokens", file=sys.stderr)
        return 1
    stream = torch.from_numpy(stream)
    tokens = torch.stack([stream[b * T:b * T + T] for b in range(B)])
    if int(tokens.max()) >= V:
        print(f"torch_reference: token {int(tokens.max())} is outside vocab_size {V}",
              file=sys.stderr)
        return 1

    Vp = (V + 127) // 128 * 128  # as the normal run pads it
    ref = np.fromfile(out("logits.f32"), dtype="<f4")
    if ref.size != B * T * Vp:
        print(f"torch_reference: {out('logits.f32')} has {ref.size} floats, not "
              f"(B={B}, T={T}, Vp={Vp}): run with the --batch/--seq-len of the normal run",
              file=sys.stderr)
        return 1
    ref = torch.from_numpy(ref.reshape(B, T, Vp)[..., :V].copy())

    with torch.no_grad():
        logits = hf_forward(w, tokens, cfg)
    diff = (logits - ref).abs().max().item()
    with open(out("hf_check.txt"), "w") as f:
        f.write(f"{diff:.9g}\n")
    ok = diff <= a.tol  # false for NaN too
    dtypes = ",".join(sorted({d for _, d in tensors.values()}))
    print(f"torch_reference: check-hf {a.check_hf} ({dtypes}) L={cfg['n_layer']} "
          f"C={cfg['n_embd']} NH={cfg['n_head']} V={V} Vp={Vp} B={B} T={T} "
          f"max_abs_diff={diff:.6g} tol={a.tol:g} {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--channels", type=int, default=32)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=67)
    ap.add_argument("--context", type=int, default=20)
    ap.add_argument("--batch", type=int, default=3)
    ap.add_argument("--seq-len", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--check-hf", metavar="DIR",
                    help="check an HF GPT-2 directory against the logits already in --out")
    ap.add_argument("--tol", type=float, default=1e-4,
                    help="max abs logit difference for --check-hf")
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.check_hf:
        return check_hf(a)
    L, C, NH, V, maxT, B, T = a.layers, a.channels, a.heads, a.vocab, a.context, a.batch, a.seq_len
    Vp = (V + 127) // 128 * 128
    gen = torch.Generator().manual_seed(a.seed)
    p = make_params(L, C, V, Vp, maxT, gen)
    stream = torch.randint(0, V, (B * T + 1,), generator=gen)
    tokens = torch.stack([stream[b * T:b * T + T] for b in range(B)])
    targets = torch.stack([stream[b * T + 1:b * T + T + 1] for b in range(B)])

    os.makedirs(a.out, exist_ok=True)
    out = lambda name: os.path.join(a.out, name)
    with open(out("model.bin"), "wb") as f:
        header = [20240326, 3, maxT, V, L, NH, C, Vp] + [0] * 248
        f.write(struct.pack("<256i", *header))
        f.write(flat(p[n] for n in NAMES))
    with open(out("tokens.bin"), "wb") as f:
        f.write(struct.pack("<256i", *([20240520, 1, B * T + 1] + [0] * 253)))
        f.write(stream.numpy().astype("<u2").tobytes())

    logits = forward(p, tokens, L, C, NH, V)
    loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))
    loss.backward()
    with open(out("logits.f32"), "wb") as f:
        f.write(flat([logits]))
    with open(out("loss.f32"), "wb") as f:
        f.write(flat([loss]))
    with open(out("grads.f32"), "wb") as f:
        f.write(flat(p[n].grad for n in NAMES))

    norm = torch.sqrt(sum((p[n].grad.double() ** 2).sum() for n in NAMES)).float()
    with open(out("gradnorm.f32"), "wb") as f:
        f.write(flat([norm]))
    if a.grad_clip > 0 and norm > a.grad_clip:
        for n in NAMES:
            p[n].grad.mul_(a.grad_clip / norm)
    opt = torch.optim.AdamW(
        [{"params": [p[n] for n in NAMES if n in DECAYED], "weight_decay": a.weight_decay},
         {"params": [p[n] for n in NAMES if n not in DECAYED], "weight_decay": 0.0}],
        lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    opt.step()
    with open(out("stepped.f32"), "wb") as f:
        f.write(flat(p[n] for n in NAMES))
    print(f"torch_reference: L={L} C={C} NH={NH} V={V} Vp={Vp} B={B} T={T} "
          f"loss={loss.item():.6f} grad_norm={norm.item():.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
