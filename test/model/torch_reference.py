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
"""
import argparse
import math
import os
import struct
import sys

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
    a = ap.parse_args()
    torch.set_num_threads(1)
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
