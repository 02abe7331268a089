#!/usr/bin/env python3
"""PyTorch counterpart of codec_bench: the same operations on the same size of tensor, on one
thread, so that tools/bench/codec_bench's figures have a baseline from a well-known library.

Throughput is fp32 bytes processed per second (4 * n / seconds), best of N runs, like
codec_bench. Run with Debian's interpreter, which has python3-torch:

    /usr/bin/python3 tools/bench/torch_codec_bench.py [n_floats] [repetitions]
"""
import sys
import time

import torch


def best_time(fn, reps):
    fn()  # warm-up
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def row(name, n, seconds, copy_gbps, note=""):
    gbps = 4.0 * n / seconds / 1e9
    print(f"{name:<40} {seconds * 1e3:9.2f} ms {gbps:8.2f} GB/s "
          f"{100 * gbps / copy_gbps:6.0f}% of copy  {note}")


def block_quantize_int8(x, block=64):
    """Symmetric per-block int8 quantization with plain torch ops (what codec q8 computes)."""
    blocks = x.view(-1, block)
    scale = blocks.abs().amax(dim=1, keepdim=True) / 127.0
    q = torch.round(blocks / torch.where(scale > 0, scale, torch.ones_like(scale)))
    return q.clamp_(-127, 127).to(torch.int8), scale


def block_dequantize_int8(q, scale):
    return (q.to(torch.float32) * scale).view(-1)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 24
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    torch.set_num_threads(1)
    torch.manual_seed(1)
    x = torch.randn(n)
    y = torch.empty_like(x)
    print(f"torch_codec_bench: torch {torch.__version__}, {n} floats, best of {reps}, "
          f"threads {torch.get_num_threads()}")
    copy_s = best_time(lambda: y.copy_(x), reps)
    copy_gbps = 4.0 * n / copy_s / 1e9
    row("copy_ (the reference bandwidth)", n, copy_s, copy_gbps)
    row("to(bfloat16)", n, best_time(lambda: x.to(torch.bfloat16), reps), copy_gbps)
    xb = x.to(torch.bfloat16)
    row("bfloat16 -> float32", n, best_time(lambda: xb.to(torch.float32), reps), copy_gbps)
    row("to(float16)", n, best_time(lambda: x.to(torch.float16), reps), copy_gbps)
    xh = x.to(torch.float16)
    row("float16 -> float32", n, best_time(lambda: xh.to(torch.float32), reps), copy_gbps)
    scale = float(x.abs().max()) / 127.0
    row("quantize_per_tensor qint8", n,
        best_time(lambda: torch.quantize_per_tensor(x, scale, 0, torch.qint8), reps), copy_gbps)
    qt = torch.quantize_per_tensor(x, scale, 0, torch.qint8)
    row("dequantize (per tensor)", n, best_time(lambda: qt.dequantize(), reps), copy_gbps)
    row("block int8 quantize (torch ops, block 64)", n,
        best_time(lambda: block_quantize_int8(x), reps), copy_gbps)
    q, s = block_quantize_int8(x)
    row("block int8 dequantize (torch ops)", n,
        best_time(lambda: block_dequantize_int8(q, s), reps), copy_gbps)
    for fraction in (0.01, 0.1):
        k = int(fraction * n)
        pct = f"{int(fraction * 100)}%"
        row(f"topk(|x|) k={pct} incl. abs", n,
            best_time(lambda: torch.topk(x.abs(), k, sorted=False), reps), copy_gbps)
        ax = x.abs()
        row(f"topk(precomputed |x|) k={pct}", n,
            best_time(lambda: torch.topk(ax, k, sorted=False), reps), copy_gbps)


if __name__ == "__main__":
    main()
