"""tokenfeed.inspect(): a dataset described and validated, as ``tokenfeed inspect`` does it,
with the same figures as a dict, or a mixture's first steps as ``tokenfeed inspect --config
FILE --steps N`` shows them. The checks and figures are the C++ library's (src/inspect/);
this module only gives them their Python name, signature and documentation."""
from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional, Union

from . import _tokenfeed as _core

_PathOrConfig = Union[str, "os.PathLike[str]", Mapping[str, Any]]


def inspect(path_or_config: _PathOrConfig, deep: bool = False, steps: Optional[int] = None) -> Dict[str, Any]:
    """Describes and validates a dataset, as ``tokenfeed inspect`` does, and returns its
    figures as a dict (the GIL is released while the files are read).

    ``path_or_config``: a dataset directory; or a config (an XML file or a mapping of its
    keys) naming one in ``dataset_dir``, whose ``block_size``, ``token_dtype``,
    ``eos_token_id``, ``val_fraction`` and ``val_seed`` are used as ``--block-size``,
    ``--token-dtype``, ``--eos-id``, ``--val-fraction`` and ``--val-seed`` are,
    and with ``dataset_mode=sft_packed`` its ``truncation``, ``pack_lookahead``,
    ``epoch_seed`` and ``context_parallel_size`` as ``--packed`` uses them. A config with a
    mixture needs ``steps`` (below); without it, ``UsageError``.

    ``deep=True`` adds the checks the loader does not make, as ``--deep``: token ids against
    ``vocab_size``, mask values (uint8 not 0/1, float32 negative), all-zero masks, and each
    shard against the SHA-256 recorded in dataset_metadata.json.

    A dataset the loader would refuse, or one failing a deep check, is reported, not raised:
    ``valid`` is False and ``error`` holds the error's ``kind`` and ``message`` (what the
    loader, or ``tokenfeed inspect``, would raise). Raised: ``UsageError`` for options that
    make no sense for the dataset, ``IoError`` for a missing directory or one with neither
    train nor val, ``FormatError`` for an invalid dataset_metadata.json.

    The dict: ``dataset_dir``, ``metadata`` (whether dataset_metadata.json exists),
    ``layout`` (``"episodes"`` or ``"token_stream"``), ``valid``, ``error``, ``splits`` (by
    name: each with its ``verdict`` line, ``valid``, ``error`` and, when it opened, its
    figures: for episodes ``shards``, ``episodes``, ``kept_episodes``, ``tokens``,
    ``token_dtype``, ``mask``, ``lengths`` percentiles, ``block``; for token streams
    ``files``, ``tokens``, ``windows``, ``documents``, ``val_fraction``; with ``deep``, what each deep check
    found, under ``deep``), ``val_ignored``, ``missing_train``, and ``config``: the keys of
    ``--print-config``'s ``<training>`` snippet (empty when the loader refuses the dataset).

    ``steps=N`` (a config with a mixture or a shape_schedule; not with ``deep``): what the mixture's first ``N``
    train steps hold, read from the batches a loader over the config gives its rank, as
    ``tokenfeed inspect --config FILE --steps N`` prints it (both come from one report made by
    the C++ library). ``N`` is in [1, 10000000]; a config with neither, a dataset
    directory, or ``deep`` with it raise ``UsageError``, and a config the loader refuses raises
    as the loader does. The dict: ``sources`` (the names, in order), ``steps``, ``rank``,
    ``batch_size``, ``block_size``; ``stages``, a list with each stage's ``first_step``,
    ``last_step`` (None when the stage begins after the steps read) and ``sources`` (by name,
    when reached: ``rows``, ``real_tokens`` (positions holding tokens, not the row's trailing
    padding), ``trained_tokens`` (positions of non-zero loss weight), each with its
    ``..._share`` of the stage in percent); ``epochs`` (by name: the epoch the source is in
    after the steps, over all ranks; None when it samples at random); and
    ``weights_from_sizes`` (None unless the weights are ``"auto"``): ``temperature``,
    ``planned_steps`` and ``sources`` by name with ``tokens``, ``rows_per_epoch``, ``weight``
    (its exact text), ``capped``, ``epochs_planned`` and ``epochs_steps`` (the epochs the
    weight repeats over ``planned_steps`` and over the steps read, all ranks; None where the
    source has no epochs or there is no plan).

    ``steps=N`` with a config that has a ``shape_schedule`` (a mixture or not): the dict (empty
    without a mixture) gains ``shape_schedule``: ``steps``, ``rank``, ``data_parallel_size``
    and ``stages``, each with ``first_step``, ``end_step`` (None on the last),
    ``global_batch_size``, ``rows`` (this rank's), ``block_size``, ``rows_before`` and
    ``tokens_before`` (the global rows and positions of the steps before it) and ``reached``
    (None for a stage starting at or after step ``N``; else its first batch's ``epoch``, None
    in random sampling, ``batch_in_epoch``, and ``unit`` and ``offset``: where its first row is
    cut in token_stream epoch windows under a sequence-length schedule, else None), read from
    the batches of a loader over the
    config up to the last stage's first step within ``N``.
    """
    return _core._inspect(path_or_config, deep, steps)
