"""Benchmark: how fast does ``posbook.apply_rope`` rotate q and k on the CPU?

Every row does the same job: rotate (or, for the reference row, copy) one query tensor and one key tensor of
shape [batch, heads, T, head_dim] in float32, producing two new tensors. Rows:

* ``copy (clone)``      — ``q.clone(); k.clone()``: reads and writes every byte once, the bandwidth ceiling for
                          any out-of-place elementwise op.
* ``HF llama``          — ``transformers.models.llama.modeling_llama.apply_rotary_pos_emb(q, k, cos, sin)``, one
                          call that rotates q and k together (half layout), cos/sin broadcast with unsqueeze as HF does.
* ``posbook half``      — ``apply_rope(q, ...); apply_rope(k, ...)`` with the half layout.
* ``posbook interleaved`` — the same with the interleaved layout.
* ``ref interleaved``   — the textbook formula ``x*cos + rotate_every_two(x)*sin`` applied to q and k, for context.
* ``blocked copy``      — q and k copied through posbook's own blocks and threads, one ``copy_`` per block: the
                          ceiling of that loop, so the gap between it and ``posbook half`` is the rotation's passes.
* with ``--formula``: ``posbook formula`` — posbook's plain formula (``rope._apply_rope_reference``: what autograd
  and small inputs use, and what ``apply_rope`` ran for every input before the blocked path existed).

For each row: median wall time of one (q, k) pair over ``--repeats`` timed repeats (after warm-up; the rows take
turns, so slow drift of the machine hits all of them alike), GB/s counting bytes read + written of x and out only
(cos/sin ignored: they are small and stay in cache), throughput relative to HF (>1 is faster), and the fraction of
copy bandwidth (copy time / row time).

Before timing, the script checks bit for bit (``torch.equal``) that posbook's half layout reproduces HF's output
and that posbook's interleaved layout reproduces the textbook interleaved formula. It also prints which way
posbook's blocked CPU path rotates each layout here (four real-valued passes per block, or one complex multiply for
the interleaved layout where that is exact: float32/float64 on x86), and that with more than one thread the blocks
are shared out to Python helper threads (``rope_cpu._run_blocks``), as many in all as torch's intra-op threads.

Run: ``.venv/bin/python benchmarks/rope_apply.py [--threads N] [--repeats R] [--formula]`` (~30 s by default).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import posbook as pb


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    """(x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...): the interleaved counterpart of HF's rotate_half."""
    pairs = x.unflatten(-1, (-1, 2))
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)


def ref_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + rotate_every_two(x) * sin


def blocked_copy(x: torch.Tensor) -> torch.Tensor:
    """x copied block by block exactly as posbook's blocked path cuts and schedules the half layout (same blocks, same
    threads), one ``copy_`` per block: what that path would reach if its rotation cost nothing but the loop."""
    from posbook import rope_cpu
    out = torch.empty_like(x)
    threads = torch.get_num_threads()
    rows_per_block = ((rope_cpu._SERIAL_NUMEL - 1) // x.shape[-1] if threads > 1
                      else max(1, rope_cpu._BLOCK_BYTES // (x.shape[-1] * x.element_size())))
    cut = rope_cpu._BlockCut(x.shape[:-1], rows_per_block)
    x_b, out_b = cut.blocks(x), cut.blocks(out)
    rope_cpu._run_blocks(len(cut), lambda i, scratch: out_b(i).copy_(x_b(i)), threads)
    return out


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()                        # results are dropped at once, so every call allocates its outputs afresh
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(),
                        help="torch intra-op threads (default: torch's own choice, %(default)s here)")
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats per row (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls per row first (default %(default)s)")
    parser.add_argument("--shape", type=int, nargs=4, default=[8, 16, 2048, 128],
                        metavar=("B", "H", "T", "D"), help="q/k shape (default: %(default)s)")
    parser.add_argument("--formula", action="store_true",
                        help="also time posbook's plain formula (the path autograd uses; apply_rope before blocking)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from transformers import __version__ as hf_version
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    b, h, t, d = args.shape
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, t, d, generator=g)
    k = torch.randn(b, h, t, d, generator=g)
    inv_freq = pb.default_inv_freq(d)
    tables = {layout: pb.rope_cos_sin(torch.arange(t), inv_freq, layout=layout) for layout in pb.LAYOUTS}
    cos_h, sin_h = tables["half"]
    cos_i, sin_i = tables["interleaved"]
    # HF's rotary embedding returns cos/sin as [batch, T, head_dim]; apply_rotary_pos_emb unsqueezes dim 1 (heads).
    cos_hf, sin_hf = cos_h[None], sin_h[None]

    # --- bit-for-bit checks before any timing ---------------------------------------------------------------------
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos_hf, sin_hf)
    assert torch.equal(pb.apply_rope(q, cos_h, sin_h, layout="half"), q_hf), "posbook half != HF (q)"
    assert torch.equal(pb.apply_rope(k, cos_h, sin_h, layout="half"), k_hf), "posbook half != HF (k)"
    del q_hf, k_hf
    for x in (q, k):
        expected = ref_interleaved(x, cos_i[None, None], sin_i[None, None])
        assert torch.equal(pb.apply_rope(x, cos_i, sin_i, layout="interleaved"), expected), \
            "posbook interleaved != x*cos + rotate_every_two(x)*sin"
        del expected

    rows = {
        "copy (clone)": lambda: (q.clone(), k.clone()),
        "HF llama apply_rotary_pos_emb": lambda: apply_rotary_pos_emb(q, k, cos_hf, sin_hf),
        "posbook half": lambda: (pb.apply_rope(q, cos_h, sin_h, layout="half"),
                                 pb.apply_rope(k, cos_h, sin_h, layout="half")),
        "posbook interleaved": lambda: (pb.apply_rope(q, cos_i, sin_i, layout="interleaved"),
                                        pb.apply_rope(k, cos_i, sin_i, layout="interleaved")),
        "ref interleaved (x*cos+rot2(x)*sin)": lambda: (ref_interleaved(q, cos_i, sin_i),
                                                        ref_interleaved(k, cos_i, sin_i)),
    }
    rows["blocked copy (posbook's half blocks)"] = lambda: (blocked_copy(q), blocked_copy(k))
    if args.formula:
        from posbook.rope import _apply_rope_reference as formula
        rows["posbook formula, half"] = lambda: (formula(q, cos_h, sin_h, "half"), formula(k, cos_h, sin_h, "half"))
        rows["posbook formula, interleaved"] = lambda: (formula(q, cos_i, sin_i, "interleaved"),
                                                        formula(k, cos_i, sin_i, "interleaved"))

    with torch.inference_mode():
        for fn in rows.values():
            for _ in range(args.warmup):
                fn()
        times = {name: [] for name in rows}
        for _ in range(args.repeats):          # round-robin so slow drift (turbo, neighbours) hits every row alike
            for name, fn in rows.items():
                times[name].append(seconds(fn))
    med = {name: statistics.median(ts) for name, ts in times.items()}

    nbytes = 2 * 2 * q.numel() * q.element_size()      # (q and k) x (read x + write out)
    t_copy, t_hf = med["copy (clone)"], med["HF llama apply_rotary_pos_emb"]
    print(f"torch {torch.__version__}, transformers {hf_version}, threads {torch.get_num_threads()}, "
          f"cpu capability {torch.backends.cpu.get_cpu_capability()}")
    print(f"q, k: [{b}, {h}, {t}, {d}] float32 ({q.numel() * q.element_size() / 2**20:.0f} MiB each); "
          f"one call = rotate q AND k (HF: one apply_rotary_pos_emb(q, k) call; posbook: two apply_rope calls)")
    print(f"median of {args.repeats} repeats after {args.warmup} warm-up calls; GB/s counts x and out bytes only")
    print("bit-exact (torch.equal, checked before timing): posbook half == HF apply_rotary_pos_emb; "
          "posbook interleaved == x*cos + rotate_every_two(x)*sin")
    from posbook import rope_cpu
    interleaved_way = ("one complex multiply per block" if rope_cpu._complex_rotation_is_exact(q, torch.empty_like(q))
                       else "four real-valued passes per block")
    print(f"posbook blocked path: half = four real-valued passes per block, interleaved = {interleaved_way}; "
          f"blocks run on {torch.get_num_threads()} thread(s)")
    print()
    print(f"{'row':<38}{'ms / (q,k)':>11}{'GB/s':>8}{'vs HF':>8}{'of copy BW':>12}")
    for name, tm in med.items():
        print(f"{name:<38}{tm * 1e3:>11.1f}{nbytes / tm / 1e9:>8.2f}{t_hf / tm:>7.2f}x{t_copy / tm:>11.0%}")


if __name__ == "__main__":
    main()
