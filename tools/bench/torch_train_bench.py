#!/usr/bin/python3
"""PyTorch side of tools/bench/train_bench: the same GPT-2 (llm.c's architecture, padded
vocabulary, tied head), batch and thread count, trained with AdamW and grad-norm clipping;
prints the median step time and tokens/s. Run with Debian's /usr/bin/python3 on the CPU; on a
GPU machine `--device cuda` (fp32, TF32 off) or `--device cuda --dtype bf16` (autocast to bf16
with fp32 master weights, as longhaul's cuda-bf16 backend) gives the GPU baseline."""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.NH))
        att = att.masked_fill(mask[:T, :T] == 0, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, Vp, maxT):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(Vp, C), nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        self.register_buffer("mask", torch.tril(torch.ones(maxT, maxT)))
        for m in self.modules():  # GPT-2 init, as longhaul's (model/init.h)
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets, V):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x, self.mask)
        logits = self.lnf(x) @ self.wte.weight.T
        return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    for name, default in [("layers", 6), ("channels", 384), ("heads", 6), ("vocab", 50257),
                          ("context", 256), ("batch", 4), ("seq-len", 256), ("warmup", 2),
                          ("steps", 5), ("threads", 2)]:
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--peak-gflops", type=float, default=0)
    ap.add_argument("--flops-per-token", type=float, default=0)
    ap.add_argument("--ours-tokens-per-s", type=float, default=0)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda:  # plain fp32 maths on the GPU, as longhaul's fp32 cuda backend
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    Vp = (a.vocab + 127) // 128 * 128
    model = GPT(a.layers, a.channels, a.heads, Vp, a.context).to(dev)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}], lr=3e-4,
                            betas=(0.9, 0.95), eps=1e-8)
    times = []
    for step in range(a.warmup + a.steps):
        data = torch.randint(0, a.vocab, (a.batch, a.seq_len + 1)).to(dev)
        sync()
        t0 = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = model(data[:, :-1], data[:, 1:], a.vocab)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        s = time.perf_counter() - t0
        if step >= a.warmup:
            times.append(s)
        print(f"  pytorch {torch.__version__} {a.device} {a.dtype} step {step}: {s:.3f} s  loss {loss.item():.4f}"
              f"{' (warmup)' if step < a.warmup else ''}", flush=True)
    times.sort()
    median = times[len(times) // 2]
    tps = a.batch * a.seq_len / median
    line = (f"RESULT pytorch-{a.device}-{a.dtype} tokens_per_s={tps:.1f} median_step_s={median:.3f} "
            f"best_step_s={times[0]:.3f}")
    if a.flops_per_token and a.peak_gflops:
        gflops = a.flops_per_token * tps / 1e9
        line += f" gflops={gflops:.1f} mfu={100 * gflops / a.peak_gflops:.1f}%"
    print(line)
    if a.ours_tokens_per_s:
        print(f"RATIO longhaul/pytorch = {a.ours_tokens_per_s / tps:.2f}x")


if __name__ == "__main__":
    main()
