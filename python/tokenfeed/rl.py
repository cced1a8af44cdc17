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

import atexit
import json
import os
import queue
import threading
import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _tokenfeed as _core
from ._tokenfeed import Batch, ConfigError, StateError, UsageError

_STATE_FORMAT = "tokenfeed-rl-loader"

# The most groups RLLoader samples ahead (prefetch_groups): enough to hide an inference
# server's latency behind several batches, and a bound on the memory they hold.
MAX_PREFETCH_GROUPS = 1024


class ScoredGroup:
    """What ``sample_and_score(prompt_ids)`` returns: the completions' token ids (after the
    prompt, not including it), one reward per completion and, optionally, each completion's
    per-token log-probabilities (same lengths). Lists, numpy arrays or CPU tensors. A dict
    with the keys ``completions``, ``rewards`` and ``log_probs`` works too. A result with
    ``tokens`` instead of ``completions`` is refused: in the RL spec's ScoredGroup,
    ``tokens`` are whole sequences, prompt included (with ``prompt_len``), and taking them
    as completions would train on the prompt twice."""

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
        completions, has_tokens = result.get("completions"), "tokens" in result
        rewards, log_probs = result.get("rewards"), result.get("log_probs")
    else:
        completions, has_tokens = getattr(result, "completions", None), hasattr(result, "tokens")
        rewards, log_probs = getattr(result, "rewards", None), getattr(result, "log_probs", None)
    if completions is None and has_tokens:
        raise UsageError(f"{where} returned 'tokens' without 'completions': tokens (the whole sequences, prompt "
                         "included, as the spec's ScoredGroup with prompt_len) are not accepted; return "
                         "'completions', each completion's ids after the prompt")
    if completions is None or rewards is None:
        raise UsageError(f"{where} returned {type(result).__name__}; expected a ScoredGroup (completions, rewards, "
                         "log_probs) or a dict with those keys")
    completions = [_as_array(c, np.int64, f"{where}: completion {i}") for i, c in enumerate(completions)]
    if len(completions) != group_size:
        raise UsageError(f"{where} returned {len(completions)} completions; group_size is {group_size}")
    if log_probs is not None:
        log_probs = [_as_array(lp, np.float32, f"{where}: log_probs {i}") for i, lp in enumerate(log_probs)]
    return (prompt, completions, log_probs, _as_array(rewards, np.float64, f"{where}: rewards"), index, episode)


def _count(name: str, value: Any, least: int, most: Optional[int] = None) -> int:
    """``value`` as an int in [least, most], else ConfigError naming the argument."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least or (
            most is not None and value > most):
        bound = f">= {least}" if most is None else f"in [{least}, {most}]"
        raise ConfigError(f"RLLoader: {name} must be an integer {bound}, got {value!r}")
    return int(value)


class _Prefetcher:
    """A thread that samples groups for pull indices start, start + 1, ... ahead of the
    batcher, at most ``depth`` sampled groups waiting. Results come out in index order; a
    sampler exception is delivered in its place and ends the thread.

    The trainer's thread never waits for this thread to end: a stopped prefetcher whose
    sampler hangs is abandoned (a daemon thread, its results discarded), and the thread of
    the next prefetcher waits for every such thread (``after``) before calling the sampler,
    so the sampler is never called from two threads at once."""

    def __init__(self, sample: Callable[[int], Tuple[Any, ...]], start: int, depth: int,
                 after: Sequence[threading.Thread] = ()) -> None:
        self.next_index = start  # the index the consumer takes next
        self._sample: Optional[Callable[[int], Tuple[Any, ...]]] = sample
        self._slots = threading.Semaphore(depth)
        self._queue: "queue.Queue[Tuple[int, Any, Optional[BaseException]]]" = queue.Queue()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(start, sample, list(after)),
                                       name="tokenfeed-rl-prefetch", daemon=True)
        _live_prefetchers.add(self)
        self.thread.start()

    def _run(self, index: int, sample: Callable[[int], Tuple[Any, ...]], after: List[threading.Thread]) -> None:
        for earlier in after:
            while earlier.is_alive() and not self._stop.is_set():
                earlier.join(0.05)
        while not self._stop.is_set():
            if not self._slots.acquire(timeout=0.05):
                continue
            try:
                item = sample(index)
            except BaseException as e:  # noqa: BLE001  (delivered to the trainer)
                self._queue.put((index, None, e))
                return
            self._queue.put((index, item, None))
            index += 1

    def take(self, index: int) -> Tuple[Any, ...]:
        assert index == self.next_index, (index, self.next_index)
        while True:
            try:
                got, item, error = self._queue.get(timeout=0.05)
                break
            except queue.Empty:
                if not self.thread.is_alive() and self._queue.empty():
                    raise RuntimeError("tokenfeed RLLoader: the prefetch thread ended without a result")
        self._slots.release()
        self.next_index += 1
        if error is not None:
            raise error
        return item

    def stop(self, wait: float = 0.0) -> None:
        """Asks the thread to stop and waits up to ``wait`` seconds for it (0: not at all)."""
        self._stop.set()
        self._sample = None
        if wait > 0:
            self.thread.join(timeout=wait)
        if not self.thread.is_alive():
            while not self._queue.empty():  # what it sampled ahead, released now
                self._queue.get_nowait()


# Prefetchers whose thread may still run: stopped at interpreter exit (before daemon threads
# are frozen, which aborts one frozen inside the extension), so that a loader never closed
# still exits cleanly.
_live_prefetchers: "weakref.WeakSet[_Prefetcher]" = weakref.WeakSet()


@atexit.register
def _stop_prefetchers_at_exit() -> None:
    for prefetcher in list(_live_prefetchers):
        prefetcher.stop(wait=1.0)


class RLLoader:
    """Packed RL batches: prompts from ``prompts_config`` (a Loader config: XML path or dict;
    its ``train/`` split, an episode-indexed dataset whose episodes are prompts, in epoch
    order with ``epoch_seed``, sliced by ``rank``/``world_size``; prompts longer than
    ``block_size`` tokens are never drawn), ``group_size`` (>= 2) completions sampled and scored per
    prompt by ``sample_and_score(prompt_ids) -> ScoredGroup``, and the C++ GroupBatcher's
    batches of ``batch_size`` x ``block_size`` (include/tokenfeed/rl.hpp): advantages
    (``advantage="grpo"``: (r - mean) / (std + eps); ``"mean_only"``: r - mean) as
    ``token_weights`` on the completions' label positions, groups whose reward std is <= eps
    dropped, ``max_attempts`` consecutive drops an error naming the prompts (with
    ``skip_failed_prompts=True``, a warning, counted in ``failed_runs``, and the loader pulls
    on: after the error, a loader made with it that loads the last ``state_dict()`` goes on
    past those prompts). Every token id must be below ``vocab_size`` (default: the prompt
    dataset's metadata ``vocab_size``; when neither is known, ids must be >= 0), and rewards
    and advantages finite in float32; else UsageError naming the pull index and completion.

    Iterating yields Batch objects (the same zero-copy numpy views as Loader's, plus
    ``log_probs``, ``rewards`` and ``group_ids``) without end. ``prefetch_groups`` > 0 (at most
    MAX_PREFETCH_GROUPS, 1024) samples up to that many groups ahead on a background thread
    (for a sampler that waits on an inference server), in the same order, so the batches
    are the same as without it; an exception the sampler raises there reaches the trainer's
    ``next()`` unchanged. The trainer never waits on that thread: after an exception (a
    KeyboardInterrupt too) or ``close()``, a sampler still running there is abandoned, and
    the next thread waits for it before sampling again.

    A ``shape_schedule`` in ``prompts_config`` (the Loader's stages: ``until_step`` or
    ``until_tokens``, ``global_batch_size``, ``block_size``) shapes the batches by step: batch
    k has its stage's ``global_batch_size`` / the data-parallel size rows of its
    ``block_size``; groups still go in pull order, a group left over opening the next batch,
    and prompts longer than the shortest block size are never drawn.

    ``state_dict()`` holds the prompt cursor and the metrics; after ``load_state_dict`` the
    sampler is asked for the same prompts in the same order as in the run that saved it.
    Keyword ``overrides`` set single keys of ``prompts_config``. One trainer thread."""

    def __init__(self, prompts_config: Union[str, "os.PathLike[str]", Mapping[str, Any]],
                 sample_and_score: Callable[[np.ndarray], Any], *, group_size: int, batch_size: int,
                 block_size: int, eps: float = 1e-6, max_attempts: int = 64, advantage: str = "grpo",
                 prefetch_groups: int = 0, vocab_size: Optional[int] = None, skip_failed_prompts: bool = False,
                 **overrides: Any) -> None:
        self._prefetcher: Optional[_Prefetcher] = None
        self._abandoned: List[threading.Thread] = []  # stopped prefetchers' threads, maybe still sampling
        if not callable(sample_and_score):
            raise UsageError("RLLoader: sample_and_score must be callable")
        group_size = _count("group_size", group_size, 2)
        batch_size = _count("batch_size", batch_size, 1)
        block_size = _count("block_size", block_size, 1)
        max_attempts = _count("max_attempts", max_attempts, 1)
        prefetch_groups = _count("prefetch_groups", prefetch_groups, 0, MAX_PREFETCH_GROUPS)
        if vocab_size is not None:
            vocab_size = _count("vocab_size", vocab_size, 1)
        overrides.setdefault("batch_size", batch_size)
        overrides.setdefault("block_size", block_size)
        self._prompts = _core._RLPrompts(prompts_config, block_size, **overrides)
        self._sampler = sample_and_score
        self.group_size = group_size
        self.prefetch_groups = prefetch_groups
        self.vocab_size: Optional[int] = vocab_size if vocab_size is not None else (self._prompts.vocab_size or None)
        self._batcher = _core._GroupBatcher(batch_size, block_size, group_size, float(eps), str(advantage),
                                            max_attempts, self._prompts.pad_token_id, self._prompts.ignore_index,
                                            self.vocab_size or 0, bool(skip_failed_prompts), self._prompts)

    # The group of pull index `index`: its prompt, the sampler's result, normalized.
    def _sample(self, index: int) -> Tuple[Any, ...]:
        _epoch, episode, prompt = self._prompts.at(index)
        return _group_tuple(self._sampler(prompt), index, episode, prompt, self.group_size)

    def _pull(self, index: int) -> Tuple[Any, ...]:
        if self.prefetch_groups == 0:
            return self._sample(index)
        if self._prefetcher is None or self._prefetcher.next_index != index:
            self._stop_prefetch()
            self._prefetcher = _Prefetcher(self._sample, index, self.prefetch_groups, self._abandoned)
        try:
            return self._prefetcher.take(index)
        except BaseException:
            self._stop_prefetch()  # the batcher goes back to its cursor; so will a new thread
            raise

    def _stop_prefetch(self, wait: float = 0.0) -> None:
        if self._prefetcher is not None:
            self._prefetcher.stop(wait)
            self._abandoned = [t for t in self._abandoned if t.is_alive()]
            if self._prefetcher.thread.is_alive():
                self._abandoned.append(self._prefetcher.thread)
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
        truncated_sequences, failed_runs (runs of max_attempts drops passed over with
        skip_failed_prompts), mean_reward, mean_advantage and mean_abs_advantage. A group's pull,
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
        """Stops the prefetch thread, waiting up to 1 s for a sampler call in progress (a
        sampler that hangs longer is abandoned); the loader can still be used: it restarts on
        demand."""
        self._stop_prefetch(wait=1.0)

    def __enter__(self) -> "RLLoader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._stop_prefetch()
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass
