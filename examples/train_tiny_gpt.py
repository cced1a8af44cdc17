"""A tiny GPT trained on the CPU through tokenfeed, with the assistant-only SFT loss.

    pip install .          # the tokenfeed package (and torch: pip install torch)
    python examples/train_tiny_gpt.py [--steps 300] [--config examples/tiny_gpt.xml]

The data is the sample chat dataset shipped in data/sample/sft (byte tokenizer: ids 0-255
are UTF-8 bytes, 256-260 the chat template's special tokens). Each step takes a ready batch
from tokenfeed: the arrays become torch tensors without a copy (torch.from_dlpack), and
the loss is the next-token cross-entropy weighted by `token_weights` - the dataset's
assistant-only mask aligned to `labels`, 0 on system, user and tool text, role tokens and
padding (there `labels` also holds -100, PyTorch's ignore_index). The loss printed every
25 steps falls from about ln(261) = 5.6. At the end: the validation loss, how long
get_batch kept the training thread, and a checkpoint holding the loader's state_dict.
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import tokenfeed

HERE = os.path.dirname(os.path.abspath(__file__))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        if hasattr(F, "scaled_dot_product_attention"):
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch < 2.0
            w = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            w = w.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            a = w.softmax(-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab, block, d=96, layers=2, heads=4):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(block, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        positions = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(positions))))


def sft_loss(model, batch):
    """Next-token cross-entropy over the assistant tokens only."""
    t = batch.to_torch(["tokens", "labels", "token_weights"])  # views of the batch, no copy
    logits = model(t["tokens"])
    per_token = F.cross_entropy(logits.flatten(0, 1), t["labels"].flatten(), ignore_index=tokenfeed.IGNORE_INDEX,
                                reduction="none")
    w = t["token_weights"].flatten()
    return (per_token * w).sum() / w.sum().clamp(min=1.0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=os.path.join(HERE, "tiny_gpt.xml"))
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    p.add_argument("--checkpoint", default="", help="where to save model + loader state (default: none)")
    p.add_argument("--check", action="store_true", help="exit 1 unless the loss fell below 3/4 of the first step's")
    a = p.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    loader = tokenfeed.Loader(a.config)
    info = loader.info("train")
    vocab = 261  # the byte tokenizer's, as data/sample/sft/dataset_metadata.json says
    model = TinyGPT(vocab, info["block_size"])
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    print(f"tokenfeed {tokenfeed.__version__}, torch {torch.__version__}: {info['kept_episodes']} conversations, "
          f"{info['batches_per_epoch']} batches of {info['batch_size']} x {info['block_size']} per epoch, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")

    window, first, last = [], None, None  # the first step's loss, the last window's mean
    start = time.perf_counter()
    for batch in loader.iter("train", steps=a.steps):
        loss = sft_loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        window.append(loss.item())
        first = window[0] if first is None else first
        if (batch.step + 1) % 25 == 0 or batch.step + 1 == a.steps:
            mean = sum(window) / len(window)
            last = mean
            print(f"step {batch.step + 1:4d}  epoch {batch.epoch}  loss {mean:.3f}  "
                  f"({(time.perf_counter() - start) / (batch.step + 1) * 1e3:.0f} ms/step)", flush=True)
            window = []

    model.eval()
    with torch.no_grad():
        val = [sft_loss(model, b).item() for b in loader.iter("val", steps=max(1, loader.batches_per_epoch("val")))]
    s = loader.stats("train")
    print(f"val loss {sum(val) / len(val):.3f}; get_batch on the training thread: p50 {s['get_batch_us']['p50']:.1f} us, "
          f"p99 {s['get_batch_us']['p99']:.1f} us, {100 * s['stall_fraction']:.1f}% of steps waited > 50 us")
    if a.checkpoint:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "loader": loader.state_dict()},
                   a.checkpoint)
        print(f"saved {a.checkpoint} (resume with loader.load_state_dict(torch.load(...)['loader']))")
    if a.check and not (last is not None and last < 0.75 * first):
        print(f"the loss did not fall enough: {first:.3f} at the first step, {last:.3f} at the end", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
