"""Encoding a run's chunks of conversations in this process or a pool of forked workers, the
results handed on in input order, so that the dataset is the same whatever the number."""
from __future__ import annotations

import collections
import os
import signal
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple

from ._conversation_encoder import ChunkResult, ConversationEncoder

# Worker processes (fork): each has the parent's encoder, copied by fork (not pickled), so
# that the tokenizer and the template are loaded and compiled once.
_worker_encoder: Optional[ConversationEncoder] = None


def _worker_init(encoder: ConversationEncoder) -> None:
    global _worker_encoder
    # The parent handles Ctrl-C and ends the pool with SIGTERM, which must end a worker
    # silently, not raise the command's own handler's exception (inherited through fork).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per worker: the workers are the parallelism
    _worker_encoder = encoder


def _worker_encode(records: Sequence[Tuple[str, Any]]) -> ChunkResult:
    assert _worker_encoder is not None
    return _worker_encoder.encode_chunk(records)



def encode_all(chunks: Iterable[List[Tuple[str, Any]]], encoder: ConversationEncoder, workers: int,
               consume: Callable[[ChunkResult], None]) -> None:
    """Encodes every chunk and hands each result to ``consume``, in input order: here when
    ``workers`` <= 1, else in that many forked processes with a bounded number in flight."""
    if workers <= 1:
        for chunk in chunks:
            consume(encoder.encode_chunk(chunk))
        return
    import multiprocessing
    pool = multiprocessing.get_context("fork").Pool(workers, _worker_init, (encoder,))
    try:
        in_flight: collections.deque = collections.deque()
        for chunk in chunks:
            in_flight.append(pool.apply_async(_worker_encode, (chunk,)))
            while len(in_flight) > 2 * workers + 2:
                consume(in_flight.popleft().get())
        while in_flight:
            consume(in_flight.popleft().get())
    finally:
        # Done or failed, the workers finish the few chunks in flight and exit: not
        # terminate(), whose first step takes the task queue's lock, which an idle worker holds
        # while it waits for a task, so that it waited for ever (the command hung on a bad
        # first line whenever the other worker was already waiting).
        pool.close()
        pool.join()
