"""Online data mixing on tokenfeed: weights set from per-source losses during the run,
killed mid-run and resumed with the same batches.

    pip install .          # the tokenfeed package (numpy only; no torch needed)
    python examples/online_mixing.py [--steps 60] [--kill-at 27] [--every 5]

Three synthetic sources of different difficulty are written here with
tokenfeed.DatasetWriter (a vocabulary of 16 ids):

    easy    each token is the previous one + 1 (mod 16): a bigram model learns it exactly
    medium  the same rule 60% of the time, else a random token
    hard    random tokens: nothing to learn (the loss stays near log 16)

A bigram model (a 16 x 16 table of logits, numpy, plain SGD) trains on the mixture. Every
--every steps the trainer updates the weights by an exponentiated-gradient rule on the
per-source losses of the last steps (tokenfeed.per_source_mean):

    w_i <- w_i * exp(eta * (loss_i - mean loss))      then normalised, mixed with uniform
                                                         (epsilon) and rounded to 4 places

and hands them to the loader for the earliest step it can still change
(loader.set_mixture_weights(..., at_step=loader.earliest_weight_step())). Sources with a
higher loss get more rows. (Online mixing methods differ in what loss they follow: excess
loss over a reference model, learning progress, ...; the rule is the trainer's, the loader
only applies the weights exactly.)

The run is made twice. Uninterrupted: --steps steps. Interrupted: a child process trains
to --kill-at, saves a checkpoint (the model, the rule's state and loader.state_dict(),
which records every weight change, also those for steps not reached yet) and is killed
with SIGKILL; a fresh loader loads the checkpoint and trains to the end. The example
asserts that every batch after the resume, the weights set and the final model equal the
uninterrupted run's, and that the audit log recorded the weight changes.
"""
import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile

import numpy as np

import tokenfeed

VOCAB = 16
BLOCK = 16
BATCH = 8
SOURCES = ("easy", "medium", "hard")
ETA = 4.0
EPSILON = 0.1
LEARNING_RATE = 0.5


def write_sources(root):
    """The three datasets, each an episode-indexed train split of 200 episodes."""
    rng = np.random.default_rng(0)
    for name, keep in zip(SOURCES, (1.0, 0.6, 0.0)):
        directory = os.path.join(root, name)
        with tokenfeed.DatasetWriter(os.path.join(directory, "train"), token_dtype="uint16", write_mask=False) as w:
            for _ in range(200):
                ids = [int(rng.integers(VOCAB))]
                for _ in range(BLOCK):
                    follow = rng.random() < keep
                    ids.append((ids[-1] + 1) % VOCAB if follow else int(rng.integers(VOCAB)))
                w.add(ids)
        tokenfeed.write_dataset_metadata(directory, token_dtype="uint16", mask_dtype=None, vocab_size=VOCAB,
                                           pad_token_id=0)


def config(root):
    return dict(batch_size=BATCH, block_size=BLOCK, prefetch_depth=3, use_loss_mask=False,
                audit_log_dir=os.path.join(root, "audit"),
                mixture=[dict(name=name, dataset_dir=os.path.join(root, name), weight=1) for name in SOURCES])


class Trainer:
    """The model, the mixing rule's state, and what the run did (for the comparison)."""

    def __init__(self):
        self.logits = np.zeros((VOCAB, VOCAB))
        self.weights = np.full(len(SOURCES), 1.0 / len(SOURCES))
        self.loss_sum = np.zeros(len(SOURCES))
        self.loss_count = np.zeros(len(SOURCES))
        self.batches = []  # a digest of every batch trained on
        self.changes = []  # (at_step, weights) set

    def step(self, batch):
        tokens = batch.tokens.astype(np.int64)
        labels = batch.labels.astype(np.int64)
        weights = batch.token_weights.astype(np.float64)
        self.batches.append(hashlib.sha256(tokens.tobytes() + batch.source_ids.tobytes()).hexdigest())
        z = self.logits[tokens]  # [B, T, V]
        p = np.exp(z - z.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        target = np.where(labels >= 0, labels, 0)
        token_loss = -np.log(np.take_along_axis(p, target[..., None], -1)[..., 0])
        per_source = tokenfeed.per_source_mean(token_loss, batch.source_ids, len(SOURCES), weights=weights)
        seen = ~np.isnan(per_source)
        self.loss_sum[seen] += per_source[seen]
        self.loss_count[seen] += 1
        grad = p
        np.put_along_axis(grad, target[..., None], np.take_along_axis(grad, target[..., None], -1) - 1, -1)
        grad *= (weights / weights.sum())[..., None]
        np.add.at(self.logits, tokens.reshape(-1), -LEARNING_RATE * grad.reshape(-1, VOCAB))

    def update_weights(self, loader):
        """The exponentiated-gradient rule on the losses since the last update."""
        mean = np.where(self.loss_count > 0, self.loss_sum / np.maximum(self.loss_count, 1), 0.0)
        w = self.weights * np.exp(ETA * (mean - mean.mean()))
        w = (1 - EPSILON) * w / w.sum() + EPSILON / len(SOURCES)
        self.weights = np.round(w, 4)
        self.loss_sum[:] = 0
        self.loss_count[:] = 0
        at = loader.earliest_weight_step()
        loader.set_mixture_weights({name: float(x) for name, x in zip(SOURCES, self.weights)}, at_step=at)
        self.changes.append((at, self.weights.tolist()))

    def save(self, path, loader):
        np.savez(path + ".npz", logits=self.logits, weights=self.weights, loss_sum=self.loss_sum,
                 loss_count=self.loss_count)
        with open(path + ".json", "w") as f:
            json.dump(dict(loader=loader.state_dict(), batches=self.batches, changes=self.changes), f)
            f.flush()
            os.fsync(f.fileno())

    @classmethod
    def load(cls, path, loader):
        t = cls()
        arrays = np.load(path + ".npz")
        t.logits, t.weights = arrays["logits"], arrays["weights"]
        t.loss_sum, t.loss_count = arrays["loss_sum"], arrays["loss_count"]
        with open(path + ".json") as f:
            saved = json.load(f)
        t.batches, t.changes = saved["batches"], [tuple(c) for c in saved["changes"]]
        loader.load_state_dict(saved["loader"])
        return t


def train(root, steps, every, start=None, kill_at=None):
    """Trains to `steps` (from the checkpoint when `start`); at `kill_at` saves a checkpoint
    and kills this process."""
    loader = tokenfeed.Loader(config(root))
    checkpoint = os.path.join(root, "checkpoint")
    trainer = Trainer.load(checkpoint, loader) if start is not None else Trainer()
    for step in range(start or 0, steps):
        if step == kill_at:
            trainer.save(checkpoint, loader)
            os.kill(os.getpid(), signal.SIGKILL)
        if step > 0 and step % every == 0:
            trainer.update_weights(loader)
        trainer.step(loader.get_batch())
    loader.close()
    return trainer


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--kill-at", type=int, default=27)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--root", help=argparse.SUPPRESS)  # the child's: the parent's directory
    args = parser.parse_args()
    tokenfeed.set_logging(False)  # the loader's lines (weights_changed ...) are in the audit log
    if args.root:  # the child process: train until killed
        train(args.root, args.steps, args.every, kill_at=args.kill_at)
        sys.exit("the child was to be killed at step %d" % args.kill_at)
    with tempfile.TemporaryDirectory() as root:
        write_sources(root)
        whole = train(root, args.steps, args.every)
        child = subprocess.run([sys.executable, __file__, "--root", root, "--steps", str(args.steps), "--kill-at",
                                str(args.kill_at), "--every", str(args.every)])
        assert child.returncode == -signal.SIGKILL, f"the child ended with {child.returncode}, not SIGKILL"
        resumed = train(root, args.steps, args.every, start=args.kill_at)
        assert resumed.batches == whole.batches, "the resumed run's batches differ from the uninterrupted run's"
        assert resumed.changes == whole.changes and np.array_equal(resumed.logits, whole.logits)
        logged = [e for name in os.listdir(os.path.join(root, "audit"))
                  for e in tokenfeed.read_audit_log(os.path.join(root, "audit", name))[0]
                  if e["action"] == "weights_changed"]
        assert len(logged) >= len(whole.changes), "the audit log lacks weight changes"
    first = dict(zip(SOURCES, whole.changes[0][1]))
    last = dict(zip(SOURCES, whole.changes[-1][1]))
    print(f"{len(whole.changes)} weight changes; first {first}, last {last}")
    print(f"killed at step {args.kill_at} and resumed: all {args.steps} batches, the weights and the model equal "
          "the uninterrupted run's")
    assert last["hard"] > last["easy"], "the rule should favour the source with the higher loss"


if __name__ == "__main__":
    main()
