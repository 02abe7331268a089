#!/usr/bin/python3
"""PyTorch side of tools/bench/train_bench: the same model, batch and thread count, trained
with AdamW and grad-norm clipping; prints the median step time and tokens/s. Run with Debian's
/usr/bin/python3 on the CPU; on a GPU machine `--device cuda` (fp32, TF32 off) or `--device cuda
--dtype bf16` (autocast to bf16 with fp32 master weights, as longhaul's cuda-bf16 backend) gives
the GPU baseline.

Each step is timed from a device synchronisation to the next (torch.cuda.synchronize on a GPU),
with the same work inside as train_bench's timer on longhaul's side: the batch is drawn before
the clock starts; its copy to the device, forward, the loss read back to the host (as longhaul
reads it), backward, clipping and AdamW are inside.

--family gpt2 (default): llm.c's GPT-2 (padded vocabulary, tied head).
--family llama: Hugging Face's LlamaForCausalLM, written here from its equations (RMSNorm,
rotary embeddings in the rotate-half convention, grouped-query causal attention, SwiGLU, no
biases, head tied or not), in the fastest form PyTorch 1.13's eager ops allow: q|k|v and
gate|up as one matmul each (longhaul stacks them the same way), and each key/value head's
group of query heads as one batched product, scaled and causally masked inside baddbmm (no
copies of the key/value heads; 1.13 has no scaled_dot_product_attention).

Two process settings make PyTorch faster on these machines; llama runs take both (gpt2 runs
neither, as their figures in docs/BENCHMARKS.md were measured): OMP_WAIT_POLICY=PASSIVE before
torch starts (--omp-wait-policy; with spinning OpenMP threads a 2-thread torch ran 1.8x slower
when another process shared the cores), and glibc malloc kept from handing freed memory back
to the kernel (--malloc keep: GLIBC_TUNABLES with mmap_max=0 and a large trim_threshold, set by
starting the script again; otherwise each step's large tensors are fresh mmap pages whose page
faults cost 10-20% of a step)."""
import argparse
import math
import os
import sys
import time


def parse_args():
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
    ap.add_argument("--family", default="gpt2", choices=["gpt2", "llama"])
    # Llama only (Hugging Face's names in parentheses).
    ap.add_argument("--kv-heads", type=int, default=0, help="num_key_value_heads (0: heads)")
    ap.add_argument("--head-dim", type=int, default=0, help="head_dim (0: channels / heads)")
    ap.add_argument("--intermediate", type=int, default=1376, help="intermediate_size")
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--norm-eps", type=float, default=1e-5, help="rms_norm_eps")
    ap.add_argument("--tied", type=int, default=0, choices=[0, 1], help="tie_word_embeddings")
    ap.add_argument("--omp-wait-policy", default="auto", choices=["auto", "passive", "active"],
                    help="OMP_WAIT_POLICY for torch's threads; auto: PASSIVE for llama, libgomp's "
                         "default for gpt2 (unless the environment sets it)")
    ap.add_argument("--malloc", default="auto", choices=["auto", "keep", "default"],
                    help="keep: glibc malloc keeps freed memory (GLIBC_TUNABLES); auto: keep for "
                         "llama, default for gpt2 (unless the environment sets GLIBC_TUNABLES)")
    return ap.parse_args()


KEEP_MALLOC = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"

ARGS = parse_args() if __name__ == "__main__" else None
if ARGS is not None:
    llama = ARGS.family == "llama"
    if "OMP_WAIT_POLICY" not in os.environ:
        policy = ARGS.omp_wait_policy
        if policy == "auto":
            policy = "passive" if llama else None
        if policy:
            os.environ["OMP_WAIT_POLICY"] = policy.upper()  # read when libgomp loads, with torch
    keep = ARGS.malloc == "keep" or (ARGS.malloc == "auto" and llama)
    if keep and "GLIBC_TUNABLES" not in os.environ:
        # glibc reads its tunables when a process starts: start again with them.
        os.environ["GLIBC_TUNABLES"] = KEEP_MALLOC
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable] + sys.argv)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


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


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps))


def rotate_half(u):
    half = u.shape[-1] // 2
    return torch.cat((-u[..., half:], u[..., :half]), dim=-1)


class LlamaBlock(nn.Module):
    """h = x + o(attention(rope(q), rope(k), v)), q|k|v = qkv(rmsnorm(x));
    y = h + down(silu(gate) * up), gate|up = gate_up(rmsnorm(h)). No biases."""

    def __init__(self, C, NH, NKV, HD, I, eps):
        super().__init__()
        self.NH, self.NKV, self.HD, self.I = NH, NKV, HD, I
        self.input_norm, self.post_norm = RMSNorm(C, eps), RMSNorm(C, eps)
        self.qkv = nn.Linear(C, (NH + 2 * NKV) * HD, bias=False)  # q_proj | k_proj | v_proj
        self.o = nn.Linear(NH * HD, C, bias=False)
        self.gate_up = nn.Linear(C, 2 * I, bias=False)  # gate_proj | up_proj
        self.down = nn.Linear(I, C, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        NH, NKV, HD = self.NH, self.NKV, self.HD
        group = NH // NKV
        q, k, v = self.qkv(self.input_norm(x)).split([NH * HD, NKV * HD, NKV * HD], dim=-1)
        q = q.view(B, T, NH, HD).transpose(1, 2)
        k = k.view(B, T, NKV, HD).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin  # (B, NH, T, HD)
        k = k * cos + rotate_half(k) * sin  # (B, NKV, T, HD)
        v = v.view(B, T, NKV, HD).transpose(1, 2)
        # Query head h reads key/value head h // group; a group's query heads are consecutive,
        # so each (batch, key/value head) is one product of its group * T query rows.
        q = q.reshape(B * NKV, group * T, HD)
        k, v = k.reshape(B * NKV, T, HD), v.reshape(B * NKV, T, HD)
        att = torch.baddbmm(mask, q, k.transpose(1, 2), alpha=1.0 / math.sqrt(HD)).softmax(dim=-1)
        y = torch.bmm(att, v).view(B, NH, T, HD).transpose(1, 2).reshape(B, T, NH * HD)
        x = x + self.o(y)
        gate, up = self.gate_up(self.post_norm(x)).split(self.I, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, L, C, NH, NKV, HD, I, Vp, T, eps, theta, tied):
        super().__init__()
        self.embed = nn.Embedding(Vp, C)
        self.blocks = nn.ModuleList(LlamaBlock(C, NH, NKV, HD, I, eps) for _ in range(L))
        self.norm = RMSNorm(C, eps)
        self.lm_head = None if tied else nn.Linear(C, Vp, bias=False)
        # Rotary tables (T, HD), Hugging Face's default rope (no rope_scaling), and the causal
        # mask as an additive (group * T, T) bias, tiled once per query head of a group.
        inv_freq = 1.0 / (theta ** (torch.arange(0, HD, 2, dtype=torch.int64).float() / HD))
        freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos())
        self.register_buffer("sin", emb.sin())
        causal = torch.full((T, T), float("-inf")).triu(1)
        self.register_buffer("mask", causal.repeat(NH // NKV, 1))
        for name, m in self.named_modules():  # as longhaul's init (model/init.cc)
            if isinstance(m, (nn.Linear, nn.Embedding)):
                std = 0.02 / math.sqrt(2 * L) if name.endswith((".o", ".down")) else 0.02
                nn.init.normal_(m.weight, 0.0, std)

    def forward(self, idx, targets, V):
        x = self.embed(idx)
        for b in self.blocks:
            x = b(x, self.cos, self.sin, self.mask)
        head = self.embed.weight if self.lm_head is None else self.lm_head.weight
        logits = self.norm(x) @ head.T
        return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))


def main():
    a = ARGS
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda:  # plain fp32 maths on the GPU, as longhaul's fp32 cuda backend
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    Vp = (a.vocab + 127) // 128 * 128
    if a.family == "llama":
        NKV = a.kv_heads or a.heads
        HD = a.head_dim or a.channels // a.heads
        model = Llama(a.layers, a.channels, a.heads, NKV, HD, a.intermediate, Vp, a.seq_len,
                      a.norm_eps, a.rope_theta, bool(a.tied)).to(dev)
    else:
        model = GPT(a.layers, a.channels, a.heads, Vp, a.context).to(dev)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}], lr=3e-4,
                            betas=(0.9, 0.95), eps=1e-8)
    if a.family == "llama":
        print(f"  pytorch settings: OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')} "
              f"GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '(unset)')} "
              f"threads={torch.get_num_threads()}", flush=True)
    times = []
    for step in range(a.warmup + a.steps):
        # What train_bench times on longhaul's side too (its header): the batch is drawn
        # before the clock starts (longhaul's DataLoader::Next likewise); its copy to the
        # device, the loss read back to the host and the whole step (AdamW included, waited
        # for by the synchronisation before the clock is read) are inside.
        batch = torch.randint(0, a.vocab, (a.batch, a.seq_len + 1))
        sync()
        t0 = time.perf_counter()
        data = batch.to(dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = model(data[:, :-1], data[:, 1:], a.vocab)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_value = loss.item()  # read each step, as longhaul's step does
        sync()
        s = time.perf_counter() - t0
        if step >= a.warmup:
            times.append(s)
        print(f"  pytorch {torch.__version__} {a.device} {a.dtype} step {step}: {s:.3f} s  loss {loss_value:.4f}"
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
