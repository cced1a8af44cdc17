"""RL batches: prompts from a tokenfeed dataset, sampled and scored by the caller, packed by
the C++ GroupBatcher into the one batch contract with GRPO advantages as token weights.

    def sample_and_score(prompt_ids):             # numpy int64 array -> ScoredGroup
        completions = [policy.generate(prompt_ids) for _ in range(4)]
        return tokenfeed.ScoredGroup(completions, rewards=[reward(c) for c in completions])

    loader = tokenfeed.RLLoader({"dataset_dir": "data/prompts"}, sample_and_score,
                                group_size=4, batch_size=8, block_size=256)
    for batch in loader:                          # endless; break when done
        t = batch.to_torch(["tokens", "labels", "token_weights"])
        logp = -F.cross_entropy(model(t["tokens"]).transpose(1, 2), t["labels"], reduction="none")
        loss = -(t["token_weights"] * logp).sum() / t["token_weights"].abs().sum()

See include/tokenfeed/rl.hpp for what a batch holds, the advantages, the filtering of
groups whose rewards do not vary, and resume.
"""
from __future__ import annotations

import json
import os
import queue
import threading
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _tokenfeed as _core
from ._tokenfeed import Batch, StateError, UsageError

_STATE_FORMAT = "tokenfeed-rl-loader"


class ScoredGroup:
    """What ``sample_and_score(prompt_ids)`` returns: the completions' token ids (after the
    prompt, not including it), one reward per completion and, optionally, each completion's
    per-token log-probabilities (same lengths). Lists, numpy arrays or CPU tensors. A dict
    with the keys ``completions`` (or ``tokens``), ``rewards`` and ``log_probs`` works too."""

    __slots__ = ("completions", "rewards", "log_probs")

    def __init__(self, completions: Sequence[Any], rewards: Sequence[float],
                 log_probs: Optional[Sequence[Any]] = None) -> None:
        self.completions = completions
        self.rewards = rewards
        self.log_probs = log_probs

    def __repr__(self) -> str:
        return f"ScoredGroup({len(self.completions)} completions, rewards={list(self.rewards)!r})"


def _as_array(values: Any, dtype: Any, what: str) -> np.ndarray:
    if hasattr(values, "detach"):  # a torch tensor
        values = values.detach().cpu().numpy()
    a = np.asarray(values)
    if a.ndim != 1:
        raise UsageError(f"{what}: expected a 1-D sequence, got shape {a.shape}")
    if np.dtype(dtype).kind in "iu" and a.size and a.dtype.kind not in "iu":
        raise UsageError(f"{what}: expected integer token ids, got dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=dtype)


def _group_tuple(result: Any, index: int, episode: int, prompt: np.ndarray, group_size: int) -> Tuple[Any, ...]:
    """The sampler's result as the tuple _GroupBatcher.next_batch expects."""
    where = f"sample_and_score for pull index {index} (prompt episode {episode})"
    if isinstance(result, Mapping):
        completions = result.get("completions", result.get("tokens"))
        rewards, log_probs = result.get("rewards"), result.get("log_probs")
    else:
        completions = getattr(result, "completions", None)
        rewards, log_probs = getattr(result, "rewards", None), getattr(result, "log_probs", None)
    if completions is None or rewards is None:
        raise UsageError(f"{where} returned {type(result).__name__}; expected a ScoredGroup (completions, rewards, "
                         "log_probs) or a dict with those keys")
    completions = [_as_array(c, np.int64, f"{where}: completion {i}") for i, c in enumerate(completions)]
    if len(completions) != group_size:
        raise UsageError(f"{where} returned {len(completions)} completions; group_size is {group_size}")
    if log_probs is not None:
        log_probs = [_as_array(lp, np.float32, f"{where}: log_probs {i}") for i, lp in enumerate(log_probs)]
    return (prompt, completions, log_probs, _as_array(rewards, np.float64, f"{where}: rewards"), index, episode)


class _Prefetcher:
    """A thread that samples groups for pull indices start, start + 1, ... ahead of the
    batcher, at most ``depth`` sampled groups waiting. Results come out in index order; a
    sampler exception is delivered in its place and ends the thread."""

    def __init__(self, sample: Callable[[int], Tuple[Any, ...]], start: int, depth: int) -> None:
        self.next_index = start  # the index the consumer takes next
        self._sample = sample
        self._slots = threading.Semaphore(depth)
        self._queue: "queue.Queue[Tuple[int, Any, Optional[BaseException]]]" = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(start,), name="tokenfeed-rl-prefetch", daemon=True)
        self._thread.start()

    def _run(self, index: int) -> None:
        while not self._stop.is_set():
            if not self._slots.acquire(timeout=0.05):
                continue
            try:
                item = self._sample(index)
            except BaseException as e:  # noqa: BLE001  (delivered to the trainer)
                self._queue.put((index, None, e))
                return
            self._queue.put((index, item, None))
            index += 1

    def take(self, index: int) -> Tuple[Any, ...]:
        assert index == self.next_index, (index, self.next_index)
        while True:
            try:
                got, item, error = self._queue.get(timeout=0.1)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    raise RuntimeError("tokenfeed RLLoader: the prefetch thread ended without a result")
        self._slots.release()
        self.next_index += 1
        if error is not None:
            raise error
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


class RLLoader:
    """Packed RL batches: prompts from ``prompts_config`` (a Loader config: XML path or dict;
    its ``train/`` split, an episode-indexed dataset whose episodes are prompts, in epoch
    order with ``epoch_seed``, sliced by ``rank``/``world_size``; prompts longer than
    ``block_size`` tokens are never drawn), ``group_size`` completions sampled and scored per
    prompt by ``sample_and_score(prompt_ids) -> ScoredGroup``, and the C++ GroupBatcher's
    batches of ``batch_size`` x ``block_size`` (include/tokenfeed/rl.hpp): advantages
    (``advantage="grpo"``: (r - mean) / (std + eps); ``"mean_only"``: r - mean) as
    ``token_weights`` on the completions' label positions, groups whose reward std is <= eps
    dropped, ``max_attempts`` consecutive drops an error naming the prompts.

    Iterating yields Batch objects (the same zero-copy numpy views as Loader's, plus
    ``log_probs``, ``rewards`` and ``group_ids``) without end. ``prefetch_groups`` > 0 samples
    up to that many groups ahead on a background thread (for a sampler that waits on an
    inference server), in the same order, so the batches are the same as without it; an
    exception the sampler raises there reaches the trainer's ``next()`` unchanged.

    ``state_dict()`` holds the prompt cursor and the metrics; after ``load_state_dict`` the
    sampler is asked for the same prompts in the same order as in the run that saved it.
    Keyword ``overrides`` set single keys of ``prompts_config``. One trainer thread."""

    def __init__(self, prompts_config: Union[str, "os.PathLike[str]", Mapping[str, Any]],
                 sample_and_score: Callable[[np.ndarray], Any], *, group_size: int, batch_size: int,
                 block_size: int, eps: float = 1e-6, max_attempts: int = 64, advantage: str = "grpo",
                 prefetch_groups: int = 0, **overrides: Any) -> None:
        if not callable(sample_and_score):
            raise UsageError("RLLoader: sample_and_score must be callable")
        if int(prefetch_groups) < 0:
            raise UsageError(f"RLLoader: prefetch_groups must be >= 0, not {prefetch_groups}")
        overrides.setdefault("batch_size", int(batch_size))
        overrides.setdefault("block_size", int(block_size))
        self._prompts = _core._RLPrompts(prompts_config, int(block_size), **overrides)
        self._sampler = sample_and_score
        self.group_size = int(group_size)
        self.prefetch_groups = int(prefetch_groups)
        self._batcher = _core._GroupBatcher(int(batch_size), int(block_size), self.group_size, float(eps),
                                            str(advantage), int(max_attempts), self._prompts.pad_token_id,
                                            self._prompts.ignore_index)
        self._prefetcher: Optional[_Prefetcher] = None

    # The group of pull index `index`: its prompt, the sampler's result, normalized.
    def _sample(self, index: int) -> Tuple[Any, ...]:
        _epoch, episode, prompt = self._prompts.at(index)
        return _group_tuple(self._sampler(prompt), index, episode, prompt, self.group_size)

    def _pull(self, index: int) -> Tuple[Any, ...]:
        if self.prefetch_groups == 0:
            return self._sample(index)
        if self._prefetcher is None or self._prefetcher.next_index != index:
            self._stop_prefetch()
            self._prefetcher = _Prefetcher(self._sample, index, self.prefetch_groups)
        try:
            return self._prefetcher.take(index)
        except BaseException:
            self._stop_prefetch()  # the batcher goes back to its cursor; so will a new thread
            raise

    def _stop_prefetch(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.close()
            self._prefetcher = None

    def next_batch(self) -> Batch:
        """The next batch (pulls, samples and scores groups until one does not fit)."""
        return self._batcher.next_batch(self._pull)

    def __iter__(self) -> "RLLoader":
        return self

    def __next__(self) -> Batch:
        return self.next_batch()

    def metrics(self) -> Dict[str, Dict[str, Any]]:
        """``{"batch": ..., "total": ...}``: the last batch's and every batch's zero_var_groups,
        valid_groups, attempts (groups pulled), attempts_per_batch, sequences,
        truncated_sequences, mean_reward, mean_advantage and mean_abs_advantage. A group's pull,
        and those of the dropped groups just before it, count in the batch that takes it."""
        return {"batch": self._batcher.batch_metrics(), "total": self._batcher.total_metrics()}

    @property
    def cursor(self) -> int:
        """The pull index a run resumed from ``state_dict()`` starts at."""
        return self._batcher.cursor

    @property
    def num_prompts(self) -> int:
        return self._prompts.size

    @property
    def config(self) -> Dict[str, str]:
        """The prompt dataset's effective config keys."""
        return self._prompts.config

    def state_dict(self) -> Dict[str, Any]:
        """A plain dict (safe for ``torch.save``): the prompt cursor, the cumulative metrics
        and the fingerprint of the prompt dataset and its order settings."""
        state = json.loads(self._batcher.save_state())
        return {"format": _STATE_FORMAT, "version": 1, "fingerprint": self._prompts.fingerprint, "batcher": state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores a ``state_dict()``: the next batch asks for the prompts that followed it.
        Raises StateError for another format or another prompt dataset or order."""
        if not isinstance(state, Mapping) or state.get("format") != _STATE_FORMAT or "batcher" not in state:
            raise StateError(f"RLLoader.load_state_dict: not an RLLoader state_dict (format {_STATE_FORMAT!r})")
        if state.get("fingerprint") != self._prompts.fingerprint:
            raise StateError("RLLoader.load_state_dict: the state belongs to another prompt dataset or order "
                             f"(fingerprint {state.get('fingerprint')!r}, this loader {self._prompts.fingerprint!r})")
        self._stop_prefetch()
        self._batcher.load_state(json.dumps(state["batcher"]))

    def close(self) -> None:
        """Stops the prefetch thread (the loader can still be used: it restarts on demand)."""
        self._stop_prefetch()

    def __enter__(self) -> "RLLoader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._stop_prefetch()
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass
