"""tokenfeed: fixed-shape LLM training batches from memory-mapped datasets, prepared ahead
of time on background C++ threads, for Python and PyTorch training loops.

    import tokenfeed

    loader = tokenfeed.Loader("data/sample/sample.xml")      # or a dict of the same keys
    for batch in loader.epoch("train"):                      # one epoch; len() batches
        x = torch.from_dlpack(batch.x)                       # no copy
        ...

- ``Loader(config, **overrides)``: ``config`` is an XML file or a dict of its keys (a relative
  ``dataset_dir`` in a dict resolves against the working directory); keyword arguments
  override single keys. Opening the dataset releases the GIL.
- ``loader.epoch(split)``: the rest of the current epoch, with ``len()``; ``iter(loader)``:
  the train split for ever; ``loader.iter(split, steps=N)``: N batches.
- ``loader.vocab_size``, ``special_token_ids``: what the dataset's metadata says (None where
  it says nothing); ``pad_token_id``, ``eot_token_id`` (the end-of-text id) and ``token_ids``:
  the ids the loader settled, by the loader's own rules.
- ``loader.get_batch(split)`` pops a ready batch, with the GIL released while it waits (in
  50 ms slices: Ctrl-C raises KeyboardInterrupt meanwhile, and consumes nothing). Its
  fields are numpy arrays that view the loader's own buffers (no copy; ``segments`` too, as
  a structured array of PackedSegment records); they stay valid while the batch or any
  array from it is alive, even after the loader is gone, and the buffers go back to the
  pool when the last of them is released. Hold at most ``max_held_batches`` (a config key,
  default ``MAX_HELD_BATCHES`` = 4) batches of a split at once (one more raises
  ``UsageError``).
- ``torch.from_dlpack(batch.x)`` and ``batch.to_torch()`` give tensors over the same memory,
  which keep the batch held as long as they live. Autograd keeps the input tensors of every
  micro-batch until ``backward()``: to accumulate gradients over more than
  ``MAX_HELD_BATCHES`` micro-batches, take copies with ``batch.to_torch(copy=True)``.
- A mixture of datasets: the dict takes ``mixture`` (a list of source dicts: ``name``,
  ``weight``, ``dataset_dir`` and any per-dataset key) and ``stages`` (a list of
  ``{"until_step": N, "weights": {"name": w}}``, the last without ``until_step``);
  ``batch.source_ids`` says each row's source, an index into ``loader.source_names``;
  ``per_source_mean(losses, batch.source_ids, n)`` each source's mean loss, and
  ``loader.set_mixture_weights({"chat": 3}, at_step=N)`` changes weights from step ``N`` on
  (``N >= loader.earliest_weight_step()``), recorded in ``state_dict()``.
- ``state_dict()`` / ``load_state_dict()``: a plain dict, safe to ``torch.save``.
- ``stats(split)``: the figures of ``tokenfeed bench``, with its names and meanings;
  ``reset_stats()`` after a warm-up, as bench's ``--warmup``.
- Errors: ``tokenfeed.Error`` and its subclasses, which are also ``ValueError`` (config,
  state, usage), ``OSError`` (io, format) or ``RuntimeError`` (pipeline); the chat template
  functions raise ``ConversationError`` (a ``ValueError``) for a conversation they cannot
  serialize.
- RL: ``RLLoader(prompts_config, sample_and_score, group_size=, batch_size=, block_size=)``
  packs scored groups of completions into the same batches, with GRPO advantages as
  ``token_weights`` (see ``tokenfeed.rl``).
- Preparation: ``DatasetWriter`` writes an episode-indexed split from token ids made by any
  tokenizer, all or nothing; the chat-template functions build them from pre-tokenized
  messages; ``prepare(input, output_dir, hf_tokenizer=DIR)`` makes a whole dataset from
  conversations with a model's own Hugging Face tokenizer and chat template (the ``[hf]``
  extra); ``prepare_text(inputs, output_dir, ...)`` makes a pretraining dataset from raw text
  (JSONL, parquet, plain text) with the built-in tokenizers or a Hugging Face one, in one
  process or as N tasks (``task=I, num_tasks=N``) that ``merge_text_parts(output_dir)`` joins
  (``tokenfeed.ray.prepare_text`` runs them on Ray).
"""
from __future__ import annotations

# Re-exports only: the extension's names, then the pure-Python parts, each in its module.
from ._tokenfeed import (  # noqa: F401  (re-exports)
    DEFAULT_SYSTEM_TEXT,
    IGNORE_INDEX,
    MAX_HELD_BATCHES,
    Batch,
    BatchIterator,
    ConfigError,
    ConversationError,
    Error,
    FormatError,
    IoError,
    Loader,
    PipelineError,
    SpecialTokenIds,
    StateError,
    Tokenizer,
    UsageError,
    __version__,
    AuditLogIterator,
    make_tokenizer,
    iter_audit_log,
    read_audit_log,
    set_logging,
)
from ._chat import (  # noqa: F401  (re-exports)
    collate_sft_batch,
    pack_sft_ids_and_mask,
    plan_sft_window,
    serialize_chat,
    serialize_chat_text,
    sft_loss_mask_for_ids,
    special_token_ids_from_metadata,
)
from ._mixing import per_source_mean  # noqa: F401  (re-export)
from ._prepare import prepare  # noqa: F401  (re-export)
from ._torch import to_torch  # noqa: F401  (re-export)
from ._writer import DatasetWriter, write_dataset_metadata  # noqa: F401  (re-exports)
from ._inspection import inspect  # noqa: F401  (re-export)
from .rl import RLLoader, ScoredGroup  # noqa: F401  (re-exports)
from .text_corpus import merge_text_parts, prepare_text  # noqa: F401  (re-exports)

__all__ = [
    "AuditLogIterator",
    "Batch",
    "BatchIterator",
    "ConfigError",
    "ConversationError",
    "DEFAULT_SYSTEM_TEXT",
    "DatasetWriter",
    "Error",
    "FormatError",
    "IGNORE_INDEX",
    "IoError",
    "Loader",
    "MAX_HELD_BATCHES",
    "PipelineError",
    "RLLoader",
    "ScoredGroup",
    "SpecialTokenIds",
    "StateError",
    "Tokenizer",
    "UsageError",
    "__version__",
    "collate_sft_batch",
    "inspect",
    "iter_audit_log",
    "make_tokenizer",
    "merge_text_parts",
    "pack_sft_ids_and_mask",
    "per_source_mean",
    "plan_sft_window",
    "prepare",
    "prepare_text",
    "serialize_chat",
    "serialize_chat_text",
    "set_logging",
    "sft_loss_mask_for_ids",
    "special_token_ids_from_metadata",
    "to_torch",
    "write_dataset_metadata",
    "read_audit_log",
]
