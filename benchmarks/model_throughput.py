"""Tokens per second of the experiment model against a minimal plain-SDPA GPT of the same size, in one run.

Both models: same width, depth, heads, vocabulary, RoPE in every layer, pre-norm RMSNorm, GELU MLP, tied
embeddings; training steps (forward, backward, AdamW) on random tokens. The baseline is the least code that
trains such a model (no options, no argument checks); the experiment model routes every layer through posbook's
pipeline. Goal: ≥ 0.95× the baseline's tokens/s.

    .venv/bin/python benchmarks/model_throughput.py [--threads N] [--steps S] [--seq-len T] [--batch B]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from posbook.experiments.model import GPT, GPTConfig


class PlainBlock(nn.Module):
    def __init__(self, d: int, heads: int, cos: torch.Tensor, sin: torch.Tensor):
        super().__init__()
        self.heads, self.cos, self.sin = heads, cos, sin
        self.qkv, self.out = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.up, self.down = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False)
        self.n1, self.n2 = nn.RMSNorm(d, eps=1e-6), nn.RMSNorm(d, eps=1e-6)

    def rope(self, x):
        half = x.shape[-1] // 2
        c, s = self.cos[: x.shape[-2], :half], self.sin[: x.shape[-2], :half]
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(self.rope(q), self.rope(k), v, is_causal=True)
        x = x + self.out(y.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class PlainGPT(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, t: int):
        super().__init__()
        inv = 10_000.0 ** (-torch.arange(0, d // heads, 2, dtype=torch.float32) / (d // heads))
        angles = torch.arange(t, dtype=torch.float32)[:, None] * inv[None, :]
        cos, sin = torch.cat((angles.cos(),) * 2, -1), torch.cat((angles.sin(),) * 2, -1)
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(PlainBlock(d, heads, cos, sin) for _ in range(layers))
        self.norm, self.head = nn.RMSNorm(d, eps=1e-6), nn.Linear(d, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, idx):
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)).float()


def tokens_per_s(model: nn.Module, batch: int, t: int, vocab: int, steps: int) -> float:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(0)
    times = []
    for step in range(steps + 2):
        idx = torch.randint(0, vocab, (batch, t + 1), generator=gen)
        start = time.perf_counter()
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step >= 2:
            times.append(time.perf_counter() - start)
    return batch * t / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--n-embd", type=int, default=256)
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2, help="alternate the two models this many times")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    vocab = 256
    torch.manual_seed(0)
    ours = GPT(GPTConfig(vocab_size=vocab, n_layer=args.n_layer, n_embd=args.n_embd, n_head=args.n_head,
                         max_seq_len=args.seq_len, pattern="R"))
    plain = PlainGPT(vocab, args.n_embd, args.n_layer, args.n_head, args.seq_len)
    n_ours, n_plain = sum(p.numel() for p in ours.parameters()), sum(p.numel() for p in plain.parameters())
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, T={args.seq_len}, batch {args.batch}, "
          f"{args.n_layer} layers × {args.n_embd} wide; parameters: posbook {n_ours:,}, plain {n_plain:,}")
    results = {"posbook GPT (pattern R)": [], "plain SDPA GPT": []}
    for _ in range(args.rounds):  # alternate, so drifting machine load hits both
        results["posbook GPT (pattern R)"].append(tokens_per_s(ours, args.batch, args.seq_len, vocab, args.steps))
        results["plain SDPA GPT"].append(tokens_per_s(plain, args.batch, args.seq_len, vocab, args.steps))
    plain_tps = statistics.median(results["plain SDPA GPT"])
    for name, values in results.items():
        tps = statistics.median(values)
        print(f"{name:28s} {tps:12,.0f} tokens/s   {tps / plain_tps:5.2f}× plain")


if __name__ == "__main__":
    main()
