#!/usr/bin/python3
"""Independent PyTorch reference for longhaul's Llama-family decoder (run with Debian's
/usr/bin/python3 and its torch; needs neither numpy, transformers nor safetensors).

Builds a small Llama (Hugging Face LlamaForCausalLM semantics, all math in fp32): token
embedding; per layer RMSNorm -> q/k/v projections (no biases) -> rotary embeddings (optionally
with llama3 frequency scaling) -> grouped-query causal attention (query head h reads kv head
h // (NH / NKV)) scaled by 1/sqrt(head_dim) -> o_proj -> residual, then RMSNorm -> SwiGLU MLP
(down(silu(gate(h)) * up(h))) -> residual; final RMSNorm; head = the embedding when tied, else
lm_head. Weights are random (normal --init-std, RMSNorm weights 1 + 0.1 * normal so they
matter), drawn in Hugging Face name order from --seed (lm_head last, so --tied and --untied
share every other weight); the tokens come from a generator seeded with --seed + 1.

Generate mode writes to --out:

  config.json        Hugging Face LlamaConfig keys (architectures, model_type "llama", sizes,
                     rms_norm_eps, rope_theta, rope_scaling null or {"rope_type": "llama3", ...},
                     tie_word_embeddings, hidden_act "silu", attention_bias/mlp_bias false,
                     torch_dtype "float32" or "bfloat16" after --dtype-out).
  model.safetensors  the initial weights under Hugging Face names (lm_head.weight only when
                     untied), dtype F32 or BF16 (round to nearest even) after --dtype-out. With
                     bf16 every result below is computed from the bf16-rounded weights (in fp32),
                     so it is exactly the model the file holds.
  tokens.bin         llm.c token file of the llama-3 kind: 256 int32 little-endian header
                     [20240801, 7, B*T+1, 0...], then B*T+1 tokens as uint32; sequence b of the
                     batch is tokens[b*T : b*T+T+1] (inputs tokens[b*T : b*T+T], targets shifted
                     by one).
  logits.f32         (B, T, V) float32 logits of the initial model.
  loss.f32           one float32: the initial mean cross-entropy over all B*T positions.
  losses.f32         --steps float32: the loss at each training step, computed before that
                     step's update, on the same batch every step (losses[0] == loss).
  gradnorms.f32      --steps float32: the global gradient norm (before clipping) at each step.
  trained/config.json, trained/model.safetensors
                     the weights after --steps steps, always F32 (torch_dtype "float32").

  A training step: loss, backward, global gradient norm (each tensor's fp32 sum of squares,
  totals in float64, stored as float32), gradients scaled by clip / norm when
  norm > --grad-clip > 0 (as llm.c and longhaul do: without clip_grad_norm_'s 1e-6), then
  torch.optim.AdamW with --weight-decay on the 2-D weights (embedding, q/k/v/o, gate/up/down,
  lm_head) and 0 on the RMSNorm weights. A tied head is the embedding, one parameter used
  twice.

Check mode (--check-logits DIR): reads DIR/config.json and the weights (DIR/model.safetensors,
or the shards named by DIR/model.safetensors.index.json; F32, BF16 or F16), evaluates the
tokens of --out/tokens.bin (split with --batch and --seq-len, which must be those of the
generating run), writes --out/logits_check.f32 and prints the largest absolute difference from
--out/logits.f32 (exit status 1 when it exceeds --tol, if given).

The safetensors files are written and parsed by hand (8-byte little-endian header length, JSON
header padded with spaces to a multiple of 8, raw little-endian data) and every written file is
read back and compared.
"""
import argparse
import json
import math
import os
import struct
import sys

# OpenMP threads that spin while they wait make every op of a 2-thread torch crawl (10x) when
# the cores are shared, as under a parallel test run; read by libgomp when torch loads it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn.functional as F

TOKEN_MAGIC, TOKEN_VERSION = 20240801, 7
ST_DTYPES = {"F32": (torch.float32, 4), "BF16": (torch.bfloat16, 2), "F16": (torch.float16, 2)}

assert sys.byteorder == "little", "this script writes little-endian data with native copies"


# ---------------------------------------------------------------------------------------------
# Raw bytes without numpy.

def tensor_bytes(t):
    """The raw (native = little-endian) bytes of a tensor."""
    t = t.detach().contiguous().reshape(-1)
    if t.dtype == torch.bfloat16 or t.dtype == torch.float16:
        t = t.view(torch.int16)
    buf = bytearray(t.numel() * t.element_size())
    if len(buf):
        torch.frombuffer(buf, dtype=t.dtype).copy_(t)
    return buf


def bytes_tensor(data, dtype, count=-1, offset=0):
    """A tensor owning a copy of `count` elements of `dtype` at `offset` in `data` (a bytearray
    or bytes)."""
    size = torch.tensor([], dtype=dtype).element_size()
    if count < 0:
        count = (len(data) - offset) // size
    if offset + count * size > len(data):
        raise ValueError(f"want {count * size} bytes at {offset}, have {len(data) - offset}")
    if count == 0:
        return torch.empty(0, dtype=dtype)
    if not isinstance(data, bytearray):  # frombuffer wants a writable buffer
        data, offset = bytearray(memoryview(data)[offset:offset + count * size]), 0
    view_dtype = torch.int16 if dtype in (torch.bfloat16, torch.float16) else dtype
    return torch.frombuffer(data, dtype=view_dtype, count=count, offset=offset).clone().view(dtype)


def read_bytes(path):
    with open(path, "rb") as f:
        data = bytearray(os.fstat(f.fileno()).st_size)
        if f.readinto(data) != len(data):
            raise ValueError(f"{path}: short read")
    return data


def write_floats(path, tensors):
    with open(path, "wb") as f:
        for t in tensors:
            f.write(tensor_bytes(t.detach().float()))


def read_floats(path):
    return bytes_tensor(read_bytes(path), torch.float32)


# ---------------------------------------------------------------------------------------------
# bf16 rounding.

def round_bf16(t):
    """fp32 -> bf16 (round to nearest even, torch's conversion) -> fp32."""
    return t.to(torch.bfloat16).float()


def check_bf16_rounding(gen):
    """Checks torch's fp32 -> bf16 conversion against round to nearest even done on the bit
    patterns: random finite values, half of them exact ties and their neighbours."""
    bits = torch.randint(0, 2 ** 31 - 2 ** 24, (1 << 16,), generator=gen, dtype=torch.int64)
    bits[1::4] = (bits[1::4] & ~0xFFFF) | 0x8000  # ties: even and odd upper halves
    bits[2::4] = (bits[2::4] & ~0xFFFF) | 0x7FFF
    bits[3::4] = (bits[3::4] & ~0xFFFF) | 0x8001
    bits[::2] += 2 ** 31  # negative half (sign bit set)
    want = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    to_f32 = lambda b: torch.where(b >= 2 ** 31, b - 2 ** 32, b).to(torch.int32).view(torch.float32)
    x = to_f32(bits)
    assert torch.isfinite(x).all()
    got = round_bf16(x).view(torch.int32)
    assert torch.equal(got, to_f32(want).view(torch.int32)), "torch's bf16 conversion is not RNE"


# ---------------------------------------------------------------------------------------------
# safetensors, by hand.

def write_safetensors(path, tensors, dtype):
    """tensors: ordered {name: fp32 tensor}; dtype "F32" or "BF16"."""
    torch_dtype, size = ST_DTYPES[dtype]
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        blob = tensor_bytes(t.detach().to(torch_dtype))
        assert len(blob) == t.numel() * size
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def read_safetensors(path):
    """{name: (fp32 tensor, dtype string)} of a safetensors file."""
    data = read_bytes(path)
    if len(data) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base, out = 8 + n, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in ST_DTYPES:
            raise ValueError(f"{path}: {name}: unsupported dtype {info['dtype']}")
        torch_dtype, size = ST_DTYPES[info["dtype"]]
        shape = [int(s) for s in info["shape"]]
        begin, end = info["data_offsets"]
        count = math.prod(shape)
        if end - begin != count * size or base + end > len(data):
            raise ValueError(f"{path}: {name}: bad data_offsets {begin}..{end} for {shape}")
        t = bytes_tensor(data, torch_dtype, count, base + begin).float().reshape(shape)
        out[name] = (t, info["dtype"])
    return out


def read_checkpoint(directory):
    """{name: fp32 tensor} from model.safetensors or the shards of its index."""
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        files = sorted(set(weight_map.values()))
    else:
        weight_map, files = None, ["model.safetensors"]
    out = {}
    for name in files:
        for k, (t, _) in read_safetensors(os.path.join(directory, name)).items():
            if k in out:
                raise ValueError(f"{directory}: tensor {k} appears in more than one shard")
            if weight_map is not None and weight_map.get(k) != name:
                raise ValueError(f"{directory}: {k} is in {name}, the index says {weight_map.get(k)}")
            out[k] = t
    if weight_map is not None:
        missing = set(weight_map) - set(out)
        if missing:
            raise ValueError(f"{directory}: indexed tensors missing from shards: {sorted(missing)}")
    return out


# ---------------------------------------------------------------------------------------------
# Config.

def make_config(a, dtype_name):
    head_dim = a.head_dim if a.head_dim else a.channels // a.heads
    rope_scaling = None
    if a.rope_scaling:
        rope_scaling = {"rope_type": "llama3", "factor": float(a.rope_factor),
                        "low_freq_factor": float(a.rope_low_freq_factor),
                        "high_freq_factor": float(a.rope_high_freq_factor),
                        "original_max_position_embeddings": int(a.rope_original_max_pos)}
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "hidden_size": a.channels,
        "initializer_range": a.init_std,
        "intermediate_size": a.intermediate,
        "max_position_embeddings": a.max_pos,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": a.heads,
        "num_hidden_layers": a.layers,
        "num_key_value_heads": a.kv_heads,
        "pretraining_tp": 1,
        "rms_norm_eps": a.eps,
        "rope_scaling": rope_scaling,
        "rope_theta": float(a.rope_theta),
        "tie_word_embeddings": a.tied,
        "torch_dtype": dtype_name,
        "use_cache": True,
        "vocab_size": a.vocab,
    }


def config_dims(cfg):
    """(L, C, NH, NKV, HD, I, V) with Hugging Face's defaults for absent keys."""
    C, NH = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    NKV = int(cfg.get("num_key_value_heads") or NH)
    HD = int(cfg.get("head_dim") or C // NH)
    if NH % NKV != 0:
        raise ValueError(f"num_key_value_heads {NKV} does not divide num_attention_heads {NH}")
    if HD % 2 != 0:
        raise ValueError(f"head_dim {HD} is odd")
    return (int(cfg["num_hidden_layers"]), C, NH, NKV, HD, int(cfg["intermediate_size"]),
            int(cfg["vocab_size"]))


def write_config(path, cfg):
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


# ---------------------------------------------------------------------------------------------
# Model.

def param_shapes(cfg):
    """Hugging Face names and shapes, in the order the weights are drawn and written."""
    L, C, NH, NKV, HD, I, V = config_dims(cfg)
    shapes = [("model.embed_tokens.weight", (V, C))]
    for i in range(L):
        pre = f"model.layers.{i}."
        shapes += [(pre + "input_layernorm.weight", (C,)),
                   (pre + "self_attn.q_proj.weight", (NH * HD, C)),
                   (pre + "self_attn.k_proj.weight", (NKV * HD, C)),
                   (pre + "self_attn.v_proj.weight", (NKV * HD, C)),
                   (pre + "self_attn.o_proj.weight", (C, NH * HD)),
                   (pre + "post_attention_layernorm.weight", (C,)),
                   (pre + "mlp.gate_proj.weight", (I, C)),
                   (pre + "mlp.up_proj.weight", (I, C)),
                   (pre + "mlp.down_proj.weight", (C, I))]
    shapes.append(("model.norm.weight", (C,)))
    if not cfg.get("tie_word_embeddings", False):
        shapes.append(("lm_head.weight", (V, C)))
    return shapes


def make_params(cfg, std, gen):
    p = {}
    for name, shape in param_shapes(cfg):
        r = torch.randn(*shape, generator=gen, dtype=torch.float32)
        p[name] = 1.0 + 0.1 * r if len(shape) == 1 else r * std
    return p


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps))


def rope_inv_freq(cfg):
    _, _, _, _, HD, _, _ = config_dims(cfg)
    theta = float(cfg.get("rope_theta", 10000.0))
    inv_freq = 1.0 / (theta ** (torch.arange(0, HD, 2, dtype=torch.int64).float() / HD))
    rs = cfg.get("rope_scaling")
    if rs is None:
        return inv_freq
    kind = rs.get("rope_type", rs.get("type"))
    if kind == "default":
        return inv_freq
    if kind != "llama3":
        raise ValueError(f"unsupported rope_scaling type {kind!r}")
    factor, low, high = float(rs["factor"]), float(rs["low_freq_factor"]), float(rs["high_freq_factor"])
    orig = float(rs["original_max_position_embeddings"])
    low_wavelen, high_wavelen = orig / low, orig / high
    wavelen = 2 * math.pi / inv_freq
    inv_freq_l = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (orig / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_freq_l / factor + smooth * inv_freq_l
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, inv_freq_l)


def rope_cos_sin(cfg, T):
    inv_freq = rope_inv_freq(cfg)
    freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)  # (T, HD/2)
    emb = torch.cat([freqs, freqs], dim=-1)  # (T, HD)
    return emb.cos(), emb.sin()


def rotate_half(u):
    half = u.shape[-1] // 2
    return torch.cat([-u[..., half:], u[..., :half]], dim=-1)


def forward(p, cfg, tokens):
    """(B, T) int64 tokens -> (B, T, V) fp32 logits."""
    L, C, NH, NKV, HD, I, V = config_dims(cfg)
    eps = float(cfg.get("rms_norm_eps", 1e-6))
    B, T = tokens.shape
    cos, sin = rope_cos_sin(cfg, T)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    group = NH // NKV
    x = p["model.embed_tokens.weight"][tokens]  # (B, T, C)
    for i in range(L):
        pre = f"model.layers.{i}."
        h = rms_norm(x, p[pre + "input_layernorm.weight"], eps)
        q = (h @ p[pre + "self_attn.q_proj.weight"].T).view(B, T, NH, HD).transpose(1, 2)
        k = (h @ p[pre + "self_attn.k_proj.weight"].T).view(B, T, NKV, HD).transpose(1, 2)
        v = (h @ p[pre + "self_attn.v_proj.weight"].T).view(B, T, NKV, HD).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(group, dim=1)  # query head h reads kv head h // group
        v = v.repeat_interleave(group, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HD)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, NH * HD)
        x = x + y @ p[pre + "self_attn.o_proj.weight"].T
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
        g = F.silu(h @ p[pre + "mlp.gate_proj.weight"].T) * (h @ p[pre + "mlp.up_proj.weight"].T)
        x = x + g @ p[pre + "mlp.down_proj.weight"].T
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else p["lm_head.weight"]
    return x @ head.T


def split_batch(stream, B, T):
    tokens = torch.stack([stream[b * T:b * T + T] for b in range(B)])
    targets = torch.stack([stream[b * T + 1:b * T + T + 1] for b in range(B)])
    return tokens, targets


# ---------------------------------------------------------------------------------------------
# Token file.

def write_tokens(path, stream):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *([TOKEN_MAGIC, TOKEN_VERSION, stream.numel()] + [0] * 253)))
        f.write(tensor_bytes(stream.to(torch.int32)))  # uint32 little-endian (ids < 2^31)


def read_tokens(path):
    data = read_bytes(path)
    if len(data) < 1024:
        raise ValueError(f"{path}: too short for an llm.c token file")
    header = struct.unpack("<256i", data[:1024])
    if header[0] != TOKEN_MAGIC or header[1] != TOKEN_VERSION:
        raise ValueError(f"{path}: not a llama-3 llm.c token file (magic {header[0]}, "
                         f"version {header[1]})")
    n = header[2]
    if len(data) != 1024 + 4 * n:
        raise ValueError(f"{path}: header says {n} tokens, file holds {(len(data) - 1024) / 4}")
    return bytes_tensor(data, torch.int32, n, 1024).to(torch.int64)


# ---------------------------------------------------------------------------------------------
# Modes.

def check_roundtrip(path, params, dtype):
    back = read_safetensors(path)
    assert list(back) == list(params), (path, list(back), list(params))
    for name, t in params.items():
        got, got_dtype = back[name]
        assert got_dtype == dtype, (path, name, got_dtype)
        want = round_bf16(t.detach()) if dtype == "BF16" else t.detach()
        assert got.shape == want.shape and torch.equal(got, want), (path, name)


def generate(a):
    dtype_name = {"f32": "float32", "bf16": "bfloat16"}[a.dtype_out]
    st_dtype = {"f32": "F32", "bf16": "BF16"}[a.dtype_out]
    cfg = make_config(a, dtype_name)
    L, C, NH, NKV, HD, I, V = config_dims(cfg)
    B, T = a.batch, a.seq_len
    if T > a.max_pos:
        raise SystemExit(f"--seq-len {T} exceeds --max-pos {a.max_pos}")

    gen = torch.Generator().manual_seed(a.seed)
    p = make_params(cfg, a.init_std, gen)
    if a.dtype_out == "bf16":
        check_bf16_rounding(torch.Generator().manual_seed(a.seed + 2))
        p = {name: round_bf16(t) for name, t in p.items()}
    stream = torch.randint(0, V, (B * T + 1,), generator=torch.Generator().manual_seed(a.seed + 1))
    tokens, targets = split_batch(stream, B, T)

    os.makedirs(a.out, exist_ok=True)
    out = lambda name: os.path.join(a.out, name)
    write_config(out("config.json"), cfg)
    write_safetensors(out("model.safetensors"), p, st_dtype)
    check_roundtrip(out("model.safetensors"), p, st_dtype)  # bf16: p is already rounded
    write_tokens(out("tokens.bin"), stream)
    assert torch.equal(read_tokens(out("tokens.bin")), stream)

    # Initial logits and loss, plus a cheap causality check: changing the last input token of
    # every sequence must leave the logits of the earlier positions unchanged.
    with torch.no_grad():
        logits = forward(p, cfg, tokens)
        loss0 = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
        poked = tokens.clone()
        poked[:, -1] = (poked[:, -1] + 1) % V
        lp = forward(p, cfg, poked)
        assert torch.allclose(lp[:, :-1], logits[:, :-1], rtol=0, atol=1e-5), "not causal"
        assert not torch.allclose(lp[:, -1], logits[:, -1]), "last position ignores its token"
    write_floats(out("logits.f32"), [logits])
    write_floats(out("loss.f32"), [loss0])
    assert torch.equal(read_floats(out("logits.f32")), logits.reshape(-1))

    # Training.
    params = {k: v.clone().requires_grad_(True) for k, v in p.items()}
    names = list(params)
    opt = torch.optim.AdamW(
        [{"params": [params[n] for n in names if params[n].dim() == 2],
          "weight_decay": a.weight_decay},
         {"params": [params[n] for n in names if params[n].dim() != 2], "weight_decay": 0.0}],
        lr=a.lr, betas=(a.beta1, a.beta2), eps=a.adam_eps)
    losses, norms = [], []
    for step in range(a.steps):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(forward(params, cfg, tokens).reshape(-1, V), targets.reshape(-1))
        loss.backward()
        # Per tensor an fp32 sum of squares (torch's cascaded sum: ~1e-8 relative; torch 1.13's
        # Tensor.norm is off by up to 1e-2 on large fp32 tensors), totals in float64.
        norm = torch.sqrt(sum(params[n].grad.pow(2).sum().double() for n in names)).float()
        if a.grad_clip > 0 and norm > a.grad_clip:
            for n in names:
                params[n].grad.mul_(a.grad_clip / norm)
        opt.step()
        losses.append(loss.detach())
        norms.append(norm)
    if a.steps > 0:
        assert abs(losses[0].item() - loss0.item()) <= 1e-5 * max(1.0, abs(loss0.item()))
    write_floats(out("losses.f32"), [torch.stack(losses)] if losses else [])
    write_floats(out("gradnorms.f32"), [torch.stack(norms)] if norms else [])

    os.makedirs(out("trained"), exist_ok=True)
    tcfg = dict(cfg, torch_dtype="float32")
    trained = {n: params[n].detach() for n in names}
    write_config(out("trained/config.json"), tcfg)
    write_safetensors(out("trained/model.safetensors"), trained, "F32")
    check_roundtrip(out("trained/model.safetensors"), trained, "F32")

    nparams = sum(t.numel() for t in p.values())
    print(f"llama_reference: L={L} C={C} NH={NH} NKV={NKV} HD={HD} I={I} V={V} B={B} T={T} "
          f"tied={cfg['tie_word_embeddings']} rope_scaling={'llama3' if cfg['rope_scaling'] else 'none'} "
          f"dtype_out={a.dtype_out} params={nparams} loss={loss0.item():.6f}")
    if losses:
        print("losses: " + " ".join(f"{l.item():.6f}" for l in losses))
        print("gradnorms: " + " ".join(f"{n.item():.6f}" for n in norms))
    return 0


def check_logits(a):
    with open(os.path.join(a.check_logits, "config.json")) as f:
        cfg = json.load(f)
    L, C, NH, NKV, HD, I, V = config_dims(cfg)
    weights = read_checkpoint(a.check_logits)
    shapes = param_shapes(cfg)
    p = {}
    for name, shape in shapes:
        if name not in weights:
            raise SystemExit(f"{a.check_logits}: missing tensor {name}")
        if tuple(weights[name].shape) != shape:
            raise SystemExit(f"{a.check_logits}: {name} has shape {list(weights[name].shape)}, "
                             f"config wants {list(shape)}")
        p[name] = weights[name]
    extra = sorted(set(weights) - set(p))
    if extra:
        print(f"llama_reference: ignoring tensors not in the model: {extra}")
    if cfg.get("tie_word_embeddings", False) and "lm_head.weight" in weights:
        if not torch.equal(weights["lm_head.weight"], p["model.embed_tokens.weight"]):
            print("llama_reference: warning: tied config but lm_head.weight differs from the "
                  "embedding; the embedding is used")

    stream = read_tokens(os.path.join(a.out, "tokens.bin"))
    B, T = a.batch, a.seq_len
    if stream.numel() != B * T + 1:
        raise SystemExit(f"tokens.bin holds {stream.numel()} tokens, --batch {B} --seq-len {T} "
                         f"want {B * T + 1}")
    if int(stream.max()) >= V:
        raise SystemExit(f"token {int(stream.max())} is outside the vocabulary of {V}")
    tokens, targets = split_batch(stream, B, T)
    with torch.no_grad():
        logits = forward(p, cfg, tokens)
        loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    write_floats(os.path.join(a.out, "logits_check.f32"), [logits])
    ref_path = os.path.join(a.out, "logits.f32")
    if not os.path.exists(ref_path):
        print(f"llama_reference: loss={loss.item():.6f}; no {ref_path} to compare with")
        return 0
    ref = read_floats(ref_path)
    if ref.numel() != logits.numel():
        raise SystemExit(f"{ref_path} holds {ref.numel()} floats, the check computed "
                         f"{logits.numel()} (B={B} T={T} V={V})")
    diff = (logits.reshape(-1) - ref).abs().max().item()
    scale = ref.abs().max().item()
    print(f"llama_reference: check loss={loss.item():.6f} max_abs_diff={diff:.6g} "
          f"max_abs_ref={scale:.6g} rel={diff / scale if scale else 0.0:.6g}")
    if a.tol is not None and not diff <= a.tol:
        print(f"llama_reference: max abs difference {diff:.6g} exceeds --tol {a.tol:g}")
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser(
        description="Independent PyTorch reference for longhaul's Llama decoder: writes a random "
        "model, tokens, logits, losses and trained weights to --out (see the module docstring).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory (check mode: the reference's)")
    ap.add_argument("--check-logits", metavar="DIR",
                    help="evaluate the checkpoint in DIR on --out/tokens.bin instead")
    ap.add_argument("--tol", type=float, default=None,
                    help="check mode: fail when the max abs logit difference exceeds this")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--channels", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=0, help="default channels / heads")
    ap.add_argument("--intermediate", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=70000)
    ap.add_argument("--seq-len", type=int, default=16)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--max-pos", type=int, default=128)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--rope-scaling", action="store_true", help="llama3 rope frequency scaling")
    ap.add_argument("--rope-factor", type=float, default=8.0)
    ap.add_argument("--rope-low-freq-factor", type=float, default=1.0)
    ap.add_argument("--rope-high-freq-factor", type=float, default=4.0)
    ap.add_argument("--rope-original-max-pos", type=int, default=16)
    tie = ap.add_mutually_exclusive_group()
    tie.add_argument("--tied", dest="tied", action="store_true", help="head = embedding")
    tie.add_argument("--untied", dest="tied", action="store_false", help="separate lm_head (default)")
    ap.set_defaults(tied=False)
    ap.add_argument("--eps", type=float, default=1e-5, help="rms_norm_eps")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--init-std", type=float, default=0.02)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--adam-eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--dtype-out", choices=["f32", "bf16"], default="f32")
    a = ap.parse_args()
    torch.set_num_threads(2)
    if a.check_logits:
        return check_logits(a)
    if a.heads % a.kv_heads != 0:
        ap.error("--kv-heads must divide --heads")
    if not a.head_dim and a.channels % a.heads != 0:
        ap.error("--heads must divide --channels (or give --head-dim)")
    return generate(a)


if __name__ == "__main__":
    sys.exit(main())
