"""Tokens per second of the experiment model against a minimal plain-SDPA GPT of the same size, in one run.

Both models: same width, depth, heads, vocabulary, RoPE in every layer, pre-norm RMSNorm, GELU MLP, tied
embeddings; training steps (forward, backward, AdamW) on random tokens. The baseline is the least code that
trains such a model (no options, no argument checks); the experiment model routes every layer through posbook's
pipeline. Goal: ≥ 0.95× the baseline's tokens/s.

With ``--layer-codes``, instead: every layer code of the experiment model (``posbook.experiments.LAYER_CODES``)
against RoPE layers in the same model, at T = 64 and T = 256, with one and two threads: tokens/s of a model whose
every layer has that code, relative to the all-R model measured in the same rounds. Local layers (S, C) get a
window / chunk of T/4, so they do less work than a global layer. Goal: every code ≥ 0.95×, local codes ≥ 1.0×.
Then what bounds a code that falls short: the FLOP ceiling (R's training FLOPs per token over the code's, from
``GPT.flops_per_token``: the most a compute-bound code can reach), each code's attention layer alone against R's,
and SDPA's causal kernel against the one an additive [H, T, T] bias forces (ALiBi, T5, FoX, CoPE) and against the
reference path, which materialises the weights (stick-breaking and CoPE have no fused kernel).

    .venv/bin/python benchmarks/model_throughput.py [--threads N] [--steps S] [--seq-len T] [--batch B]
    .venv/bin/python benchmarks/model_throughput.py --layer-codes [--rounds R] [--steps S] [--codes RBX]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from local_attention import timed
import posbook as pb
from posbook.experiments.model import GPT, LAYER_CODES, GPTConfig


class PlainBlock(nn.Module):
    def __init__(self, d: int, heads: int, cos: torch.Tensor, sin: torch.Tensor):
        super().__init__()
        self.heads = heads
        self.register_buffer("cos", cos, persistent=False)    # buffers: .to(device) moves them
        self.register_buffer("sin", sin, persistent=False)
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


def tokens_per_s(model: nn.Module, batch: int, t: int, vocab: int, steps: int, *, device=None, precision=None,
                 backend: str | None = None, warmup: int = 2) -> float:
    """Training tokens/s (forward, backward, AdamW) on random tokens, the median over ``steps`` timed steps after
    ``warmup`` untimed ones. ``device`` (default: the CPU), ``precision`` (a posbook.device.TrainingPrecision: its
    autocast; default none) and ``backend`` (a torch.compile backend; default: eager, not compiled) serve
    tools/gpu_check.py on a GPU; the defaults are this script's CPU measurement."""
    device = torch.device("cpu") if device is None else torch.device(device)
    step_model = model if backend is None else torch.compile(model, backend=backend)
    autocast = precision.autocast(device) if precision is not None else contextlib.nullcontext()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    gen = torch.Generator().manual_seed(0)
    times = []
    for step in range(steps + warmup):
        idx = torch.randint(0, vocab, (batch, t + 1), generator=gen).to(device)
        sync(device)
        start = time.perf_counter()
        with autocast:
            logits = step_model(idx[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(device)
        if step >= warmup:
            times.append(time.perf_counter() - start)
    return batch * t / statistics.median(times)


def sync(device: torch.device) -> None:
    """Wait for the device's queued work, so a timer sees it (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def layer_code_table(args) -> None:
    """Each layer code's tokens/s over the all-RoPE model's, measured side by side (alternating) in one run."""
    print(f"torch {torch.__version__}; {args.n_layer} layers x {args.n_embd} wide, {args.n_head} heads, batch "
          f"{args.batch}; tokens/s of an all-<code> model / an all-R model, median of {args.rounds} rounds")
    codes = args.codes
    header = f"{'code':5s} {'what':40s}"
    columns = [(threads, t) for threads in (1, 2) for t in (64, 256)]
    header += "".join(f"  {f'{n}t T={t}':>10s}" for n, t in columns)
    rows = {code: [] for code in codes}
    for threads, t in columns:
        torch.set_num_threads(threads)
        models = {}
        for code in codes:
            torch.manual_seed(0)
            models[code] = GPT(GPTConfig(vocab_size=256, n_layer=args.n_layer, n_embd=args.n_embd, n_head=args.n_head,
                                         max_seq_len=t, pattern=code, window=t // 4, chunk_size=t // 4))
        ratios = {code: [] for code in codes}
        for _ in range(args.rounds):     # alternate every code with R, so drifting machine load hits both alike
            for code in codes:
                base = tokens_per_s(models["R"], args.batch, t, 256, args.steps)
                ratios[code].append(tokens_per_s(models[code], args.batch, t, 256, args.steps) / base)
        for code in codes:
            rows[code].append(statistics.median(ratios[code]))
    print(header)
    for code in codes:
        print(f"{code:5s} {LAYER_CODES[code].summary:40s}" + "".join(f"  {r:10.2f}" for r in rows[code]))
    bounds(args, columns)


def bounds(args, columns) -> None:
    """What bounds a code that falls short: its attention layer alone (projections, position scheme, attention core,
    output; forward + backward), as R's layer time over the code's, in the same rounds; then the SDPA kernel a bias
    forces (an additive [H, T, T] float mask, without and with a gradient, as ALiBi and T5 pass it) against SDPA's
    causal kernel. The MLP, norms, embeddings and optimiser cost the same in every code, so a model's ratio lies
    between 1 and its attention layer's."""
    codes = args.codes
    print("\nFLOP ceiling: R's training FLOPs per token / the code's (GPT.flops_per_token)")
    print(f"{'code':5s}" + "".join(f"  {f'T={t}':>10s}" for t in sorted({t for _, t in columns})))
    for code in codes:
        ratios = []
        for t in sorted({t for _, t in columns}):
            flops = {c: GPT(GPTConfig(vocab_size=256, n_layer=args.n_layer, n_embd=args.n_embd, n_head=args.n_head,
                                      max_seq_len=t, pattern=c, window=t // 4, chunk_size=t // 4)).flops_per_token(t)
                     for c in ("R", code)}
            ratios.append(flops["R"] / flops[code])
        print(f"{code:5s}" + "".join(f"  {r:10.2f}" for r in ratios))
    print(f"\nattention layer alone, forward + backward: R's time / the code's (batch {args.batch})")
    print(f"{'code':5s}" + "".join(f"  {f'{n}t T={t}':>10s}" for n, t in columns))
    rows = {code: [] for code in codes}
    kernels = {name: [] for name in ("bias, no grad", "bias with grad", "reference path")}
    for threads, t in columns:
        torch.set_num_threads(threads)
        layers, x = {}, torch.randn(args.batch, t, args.n_embd, requires_grad=True)
        for code in codes:
            torch.manual_seed(0)
            layers[code] = GPT(GPTConfig(vocab_size=256, n_layer=1, n_embd=args.n_embd, n_head=args.n_head,
                                         max_seq_len=t, pattern=code, window=t // 4, chunk_size=t // 4)).blocks[0].attn
        ratios = {code: [] for code in codes}
        for _ in range(args.rounds):
            for code in codes:
                base = timed(lambda: layers["R"](x).sum().backward(), args.steps, warmup=2)
                ratios[code].append(base / timed(lambda: layers[code](x).sum().backward(), args.steps, warmup=2))
        for code in codes:
            rows[code].append(statistics.median(ratios[code]))
        d = args.n_embd // args.n_head
        q, k, v = (torch.randn(args.batch, args.n_head, t, d, requires_grad=True) for _ in range(3))
        bias = torch.randn(args.n_head, t, t).masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        bias_grad = bias.clone().requires_grad_()
        causal = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward(), args.steps, warmup=2)
        kernels["bias, no grad"].append(causal / timed(
            lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=bias).sum().backward(), args.steps, warmup=2))
        kernels["bias with grad"].append(causal / timed(
            lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=bias_grad).sum().backward(), args.steps, warmup=2))
        # softmax over the materialised logits, as a normaliser without a fused kernel runs (stick-breaking; CoPE,
        # which needs the logits for its gates, computes them once more besides)
        kernels["reference path"].append(causal / timed(
            lambda: pb.attention(q, k, v, causal=True, impl="reference").sum().backward(), args.steps, warmup=2))
    for code in codes:
        print(f"{code:5s}" + "".join(f"  {r:10.2f}" for r in rows[code]))
    print("\nthe core alone, forward + backward: SDPA's causal kernel's time / SDPA with a [H, T, T] additive mask,"
          " and / the reference path")
    for name, values in kernels.items():
        print(f"{name:16s}" + "".join(f"  {r:10.2f}" for r in values))


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
    parser.add_argument("--layer-codes", action="store_true", help="the per-layer-code table (4 × 128 model)")
    parser.add_argument("--codes", default="".join(LAYER_CODES),
                        help="with --layer-codes, the codes to measure (R, the reference, is always measured)")
    args = parser.parse_args()
    unknown = sorted(set(args.codes) - set(LAYER_CODES))
    if unknown:
        parser.error(f"--codes holds {unknown}, which are not layer codes; the codes are {''.join(LAYER_CODES)}")
    args.codes = ["R"] + [c for c in dict.fromkeys(args.codes) if c != "R"]
    if args.layer_codes:
        if args.n_embd == 256:       # the table's model is the 4 × 128 of the experiments
            args.n_embd = 128
        layer_code_table(args)
        return
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
