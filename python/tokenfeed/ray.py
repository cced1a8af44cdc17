"""prepare-text on a Ray cluster: the N tasks of ``prepare_text(..., task=I, num_tasks=N)`` as
Ray tasks, then the merge.

    import ray, tokenfeed.ray
    ray.init()
    tokenfeed.ray.prepare_text(["s3-mounted/web/*.jsonl.zst"], "/shared/data/web", num_tasks=64,
                               tokenizer="sentencepiece:tok.model", workers=8)

Each task prepares its part of the inputs into ``OUTPUT_DIR/parts/I`` on the node Ray places it
on (the output directory must be on a file system every node sees), asking Ray for
``workers`` CPUs (1 when ``workers`` is 0, the library's "all cores"). A task always runs with
``resume=True``: when Ray retries it (a worker that died, a node that left, an exception;
``max_retries`` times), the retry takes over the staging directory the failed attempt left and
keeps every shard it finished, as ``tokenfeed prepare-text --resume`` does. Once every task has
finished, the parts are merged in this process (``tokenfeed.merge_text_parts``). Needs ``ray``
(``pip install ray``); the tasks need tokenfeed installed on every node.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Sequence, Union

from ._tokenfeed import ConfigError
from .text_corpus import _Path, merge_text_parts
from .text_corpus import prepare_text as _prepare_text

__all__ = ["prepare_text"]


def _run_task(inputs: Sequence[str], output_dir: str, index: int, num_tasks: int, max_part_bytes: int,
              options: Dict[str, Any]) -> Dict[str, Any]:
    """One task, in a Ray worker: its part, resumed from what an earlier attempt finished."""
    part = os.path.join(output_dir, "parts", str(index))
    if os.path.exists(os.path.join(part, "dataset_metadata.json")):
        # An attempt finished the part, and Ray ran the task again (its result was lost).
        return {"task": index, "written": part, "already_finished": True}
    summary = _prepare_text(list(inputs), output_dir, task=index, num_tasks=num_tasks,
                            max_part_bytes=max_part_bytes, resume=True, **options)
    summary["task"] = index
    return summary


def prepare_text(inputs: Union[_Path, Sequence[_Path]], output_dir: _Path, *, num_tasks: int,
                 max_part_bytes: int = 0, max_retries: int = 3, **options: Any) -> Dict[str, Any]:
    """Prepares ``output_dir`` from raw text as ``num_tasks`` Ray tasks, then merges them.
    ``options``: ``tokenfeed.prepare_text``'s (``tokenizer``, ``val_split``, ``workers``, ...,
    not ``task``, ``num_tasks`` or ``resume``, which this sets; a ``progress`` callback is called in
    the tasks' workers). ``max_retries``: Ray's, per task
    (worker deaths and exceptions alike). Returns the merge's summary, with ``tasks``: each
    task's own summary, in task order. Ray must be initialized (``ray.init``) or initializes
    itself as ``ray.remote`` does."""
    try:
        import ray
    except ImportError as e:
        raise ConfigError(f"tokenfeed.ray needs the ray package (pip install ray): {e}") from e
    if isinstance(num_tasks, bool) or not isinstance(num_tasks, int) or num_tasks < 1:
        raise ConfigError(f"num_tasks must be a positive integer, not {num_tasks!r}")
    for key in ("task", "resume"):
        if key in options:
            raise ConfigError(f"tokenfeed.ray.prepare_text sets {key} itself")
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    paths = [os.path.abspath(os.fspath(p)) for p in inputs]
    out = os.path.abspath(os.fspath(output_dir))
    workers = int(options.get("workers", 0))
    task = ray.remote(num_cpus=max(1, workers), max_retries=max_retries, retry_exceptions=True)(_run_task)
    refs = [task.remote(paths, out, i, num_tasks, max_part_bytes, options) for i in range(num_tasks)]
    summaries = ray.get(refs)
    merged = merge_text_parts(out)
    merged["tasks"] = summaries
    return merged
