"""Does a local layer really do less work? Time of sliding-window and chunked attention vs global causal attention.

Forward + backward at T = 2048, window/chunk W = 128, measured side by side in one run, for the attention call
alone and for a whole attention layer of the experiment model (projections, RoPE, attention, output). The FLOP
ratio counts the (query, key) pairs each mask allows: T(T+1)/2 for causal, Σ min(i+1, W) for sliding, T(W+1)/2
for chunked. Goal: speedup ≥ 0.7 × FLOP ratio.

    .venv/bin/python benchmarks/local_attention.py [--threads N] [--repeats R] [--seq-len T] [--window W]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from posbook.local import local_attention
from posbook.experiments.model import GPT, GPTConfig


def pairs(kind: str, t: int, w: int) -> int:
    if kind == "causal":
        return t * (t + 1) // 2
    if kind == "sliding":
        return sum(min(i + 1, w) for i in range(t))
    return sum(i % w + 1 for i in range(t))


def timed(fn, repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--window", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t, w = args.seq_len, args.window
    print(f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, "
          f"T={t}, W={w}, batch {args.batch}, heads {args.heads}, head_dim {args.head_dim}; forward+backward, "
          f"median of {args.repeats}")

    def qkv():
        return [torch.randn(args.batch, args.heads, t, args.head_dim, device=device, requires_grad=True)
                for _ in range(3)]

    q, k, v = qkv()
    calls = {
        "causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "sliding": lambda: local_attention(q, k, v, kind="sliding", window=w),
        "chunked": lambda: local_attention(q, k, v, kind="chunked", chunk_size=w),
    }
    print(f"\n{'attention call':28s} {'ms':>9s} {'speedup':>8s} {'FLOP ratio':>11s} {'speedup/ratio':>14s}")
    base = None
    for kind, fn in calls.items():
        ms = timed(lambda: fn().sum().backward(), args.repeats) * 1e3
        base = base or ms
        ratio = pairs("causal", t, w) / pairs(kind, t, w)
        print(f"{kind:28s} {ms:9.1f} {base / ms:8.2f} {ratio:11.2f} {base / ms / ratio:14.2f}")

    n_embd = args.heads * args.head_dim
    x = torch.randn(args.batch, t, n_embd, device=device, requires_grad=True)
    print(f"\n{'whole attention layer':28s} {'ms':>9s} {'speedup':>8s} {'FLOP ratio':>11s} {'speedup/ratio':>14s}")
    base = None
    for code, kind in (("R", "causal"), ("S", "sliding"), ("C", "chunked")):
        config = GPTConfig(pattern=code, n_layer=1, n_embd=n_embd, n_head=args.heads, window=w, chunk_size=w,
                           max_seq_len=t)
        layer = GPT(config).blocks[0].attn.to(device)
        ms = timed(lambda: layer(x).sum().backward(), args.repeats) * 1e3
        base = base or ms
        ratio = pairs("causal", t, w) / pairs(kind, t, w)
        print(f"{code} ({kind}){'':{18 - len(kind)}s} {ms:9.1f} {base / ms:8.2f} {ratio:11.2f} {base / ms / ratio:14.2f}")
    print("\nThe layer's projections cost the same in every scheme, so its speedup is bounded below the attention's.")


if __name__ == "__main__":
    main()
