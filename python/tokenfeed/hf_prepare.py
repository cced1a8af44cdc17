"""SFT datasets prepared with a model's own Hugging Face tokenizer and chat template.

    tokenfeed.prepare("chats.jsonl", "data/chat", hf_tokenizer="models/Llama-3-8B-Instruct")
    python -m tokenfeed.hf_prepare --input chats.parquet --output-dir data/chat --hf-tokenizer DIR
    tokenfeed prepare --hf-tokenizer DIR --input chats.jsonl --output-dir data/chat   (runs this module)

``DIR`` is a local tokenizer directory: ``tokenizer.json`` (the fast tokenizer) and
``tokenizer_config.json`` whose ``chat_template`` (or a ``chat_template.jinja`` beside it) is
the model's Jinja template. Nothing is downloaded. Each conversation is rendered with that
template in a Jinja environment like Hugging Face's and tokenized with ``tokenizers`` without
adding special tokens (the template writes them), as ``apply_chat_template`` does.

The assistant-only loss mask comes from the template itself:
- a template with ``{% generation %}...{% endgeneration %}`` blocks: the characters those
  blocks render are trained (what ``return_assistant_tokens_mask`` uses);
- any other template: for each assistant message k, the conversation's first k messages are
  rendered with the generation prompt and its first k + 1 without; the characters between
  the two ends are the assistant's reply and what closes its turn. Both renderings must be
  prefixes of the whole conversation's rendering, else the template is inconsistent and the
  conversation is an error (not a silently wrong mask). Whitespace after the last special
  token of that difference (the newline after ChatML's ``<|im_end|>``) is not trained.
Characters map to tokens through the tokenizer's offsets: a token is trained when its
characters overlap a trained range. (For an ASCII conversation and a byte-level BPE, the
same character ranges are found from the tokens' texts, checked to make up the text, instead
of asking the tokenizer for offsets, a sixth of its time: see _TokenPieces.) An assistant
message with ``"weight": 0`` (OpenAI's format) is not trained.

Inputs: JSONL (one object per line, ``.gz`` accepted) or parquet (``.parquet``), each record
holding a list of messages (``messages``, or ``messages_field``) and optionally ``tools``
(a list, or a JSON string of one). Keys whose value is null are dropped from messages (a
parquet struct column has every key in every row), so JSONL and parquet of the same
conversations give the same dataset, byte for byte.

Needs the ``hf`` extra: ``pip install 'tokenfeed[hf]'`` (tokenizers, jinja2, pyarrow).
"""
from __future__ import annotations

import argparse
import array
import collections
import datetime
import gzip
import hashlib
import json
import operator
import os
import re
import shutil
import signal
import struct
import sys
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._command import run_command
from . import (ConfigError, DatasetWriter, FormatError, IoError, __version__,
               write_dataset_metadata)

EXTRA_HINT = "pip install 'tokenfeed[hf]' (the packages tokenizers, jinja2 and, for parquet input, pyarrow)"

# Bad-record reasons, counted under --on-error skip (all of them recorded in the metadata).
REASONS = ("invalid_json", "bad_messages", "no_assistant", "template_error", "inconsistent_template",
           "empty_mask")

# The oldest jinja2 that renders untrusted chat templates safely (3.1.5 and older leak the
# environment through str.format: CVE-2025-27516); pyproject.toml requires it too, and a
# user's environment holding an older one is refused at run time.
MIN_JINJA2 = (3, 1, 6)
# The most characters one conversation may render to: a template looping without bound
# (nested range(100000)) is stopped once its output passes this, as a template_error. The
# output is counted as it streams; a {% generation %} block is counted when it ends. A
# loop that outputs nothing is bounded by MAX_RENDER_SECONDS instead.
MAX_RENDERED_CHARS = 1 << 24

# The most seconds one conversation's rendering may take: checked at every call the template
# makes (range(), methods, macros) and every output chunk, so nested loops stop within
# about one inner loop of it, as a template_error.
MAX_RENDER_SECONDS = 10.0

# The longest JSONL line read, in bytes (prepare's max_line_bytes, --max-line-bytes): a
# longer one is read in bounded pieces and is an invalid_json record (skipped and counted
# under --on-error skip), so that one huge line cannot take the memory of the run.
MAX_LINE_BYTES = 64 << 20

_GENERATION_TAG = re.compile(r"{%-?\s*generation\s*-?%}")
_RANDOM_NAMES = re.compile(r"random|lipsum")
_SPLIT_DOMAIN = b"tokenfeed-hf-split-v1\0"
# The array module's code for a 32-bit unsigned integer ('I' on every platform Python runs on today).
_UINT32_CODE = next(code for code in "IL" if array.array(code).itemsize == 4)


def _require(module: str, what: str) -> Any:
    """Imports an optional dependency, or raises ConfigError saying what to install."""
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ConfigError(f"{what} needs the Python package '{module}', which is not installed ({e}); "
                          f"install it with: {EXTRA_HINT}") from e


class BadRecord(Exception):
    """A conversation that cannot be prepared: ``reason`` (one of REASONS) and what is wrong."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


# ---------------------------------------------------------------------------------------
# The tokenizer directory


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _token_text(value: Any) -> Optional[str]:
    """A special token from tokenizer_config.json: a string, or an AddedToken dict."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _trims_offsets(config: Any) -> bool:
    """Whether a tokenizer.json post_processor (or one in a Sequence) trims offsets."""
    if isinstance(config, dict):
        return config.get("trim_offsets") is True or any(_trims_offsets(v) for v in config.values())
    if isinstance(config, list):
        return any(_trims_offsets(v) for v in config)
    return False


def _byte_level_chars() -> Dict[int, int]:
    """The ByteLevel pre-tokenizer's alphabet (GPT-2's bytes_to_unicode), inverted: for each
    character it writes, the byte it stands for, as a str.translate table."""
    printable = ([*range(ord("!"), ord("~") + 1)] + [*range(ord("\u00a1"), ord("\u00ac") + 1)] +
                 [*range(ord("\u00ae"), ord("\u00ff") + 1)])
    table = {b: b for b in printable}
    others = [b for b in range(256) if b not in table]
    table.update({256 + i: b for i, b in enumerate(others)})
    return table


class _TokenPieces:
    """The text of every token of a byte-level BPE tokenizer, to find the characters of each
    token of an ASCII text without asking the tokenizer for offsets.

    Offsets are a sixth of the tokenizer's time (encode_batch maps every byte of the text to
    its character in a hash map; encode_batch_fast gives the same ids without them). For a
    byte-level BPE whose normalizer, if any, is a Unicode normal form (each leaves ASCII as
    it is) and whose offsets are not trimmed, the tokens of a text are consecutive runs of its
    bytes, and an ASCII text's bytes are its characters: token i covers the characters from
    the end of token i - 1 over the length of its text. That is used only where it is checked:
    the tokens' texts, one after the other, must be the text itself (see ``tiling``)."""

    NORMAL_FORMS = frozenset(("NFC", "NFD", "NFKC", "NFKD"))

    def __init__(self, pieces: List[str]) -> None:
        self.pieces = pieces
        self.lengths = np.array([len(p) for p in pieces], dtype=np.int64)

    @classmethod
    def of(cls, hf: "HfTokenizer") -> Optional["_TokenPieces"]:
        """The pieces of ``hf``'s tokenizer, or None where the tokenizer is not of that kind."""
        tok = hf.tokenizer
        if not hf.offsets_tile_text or not hasattr(tok, "encode_batch_fast"):
            return None
        model = tok.model
        if type(model).__name__ != "BPE" or model.dropout or model.continuing_subword_prefix or \
                model.end_of_word_suffix:
            return None

        def parts(component: Any) -> List[Dict[str, Any]]:
            if component is None:
                return []
            config = json.loads(component.__getstate__())
            return config.get("normalizers") or config.get("pretokenizers") or [config]

        if not {part.get("type") for part in parts(tok.normalizer)} <= cls.NORMAL_FORMS:
            return None
        byte_level = [part for part in parts(tok.pre_tokenizer) if part.get("type") == "ByteLevel"]
        # A prefix space, or an added token that takes the whitespace beside it (lstrip,
        # rstrip), makes tokens that do not tile the text: every text would fail the check.
        if not byte_level or any(part.get("add_prefix_space") for part in byte_level) or \
                any(t.lstrip or t.rstrip for t in tok.get_added_tokens_decoder().values()):
            return None
        byte_of = _byte_level_chars()
        alphabet = frozenset(map(chr, byte_of))
        # A token with a character outside that alphabet (which the pre-tokenizer never
        # writes) is U+FFFD, and a byte above 127 a character above 127: a text with such a
        # token is not ASCII, so it fails the check.
        pieces = ["\ufffd"] * hf.vocab_size
        for text, token_id in tok.get_vocab(with_added_tokens=False).items():
            if 0 <= token_id < len(pieces):
                pieces[token_id] = text.translate(byte_of) if alphabet.issuperset(text) else "\ufffd"
        for token_id, added in tok.get_added_tokens_decoder().items():
            if 0 <= token_id < len(pieces):
                pieces[token_id] = added.content
        return cls(pieces)

    def tiling(self, text: str, ids: Sequence[int]) -> Optional["_Tiling"]:
        """Where the tokens ``ids`` of the ASCII ``text`` lie in it, or None when their texts
        do not make up the text exactly (then ask the tokenizer)."""
        if not ids:
            return None
        parts = operator.itemgetter(*ids)(self.pieces)
        if (parts if len(ids) == 1 else "".join(parts)) != text:
            return None
        return _Tiling(np.cumsum(self.lengths[np.frombuffer(array.array(_UINT32_CODE, ids), dtype=np.uint32)]))


class _Tiling:
    """What token_mask asks of a tokenizers Encoding, for tokens that tile a text: token i
    covers the characters [ends[i - 1], ends[i])."""

    __slots__ = ("ends",)

    def __init__(self, ends: np.ndarray) -> None:
        self.ends = ends

    def __len__(self) -> int:
        return len(self.ends)

    def char_to_token(self, position: int) -> Optional[int]:
        i = int(np.searchsorted(self.ends, position, side="right"))
        return i if 0 <= position and i < len(self.ends) else None

    def token_to_chars(self, i: int) -> Tuple[int, int]:
        return (int(self.ends[i - 1]) if i else 0, int(self.ends[i]))

    @property
    def offsets(self) -> List[Tuple[int, int]]:
        return [self.token_to_chars(i) for i in range(len(self.ends))]


class HfTokenizer:
    """A local Hugging Face tokenizer directory: the fast tokenizer, the chat template and the
    special tokens. Read-only after construction."""

    SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")

    def __init__(self, directory: Union[str, "os.PathLike[str]"]) -> None:
        directory = os.fspath(directory)
        self.directory = directory
        if not os.path.isdir(directory):
            looks_like_hub = re.fullmatch(r"[\w.-]+/[\w.-]+", directory) is not None and not os.path.exists(directory)
            hint = (" It looks like a Hugging Face Hub name: tokenfeed reads local files only and downloads "
                    "nothing; fetch the tokenizer first, e.g. `huggingface-cli download " + directory +
                    " tokenizer.json tokenizer_config.json --local-dir DIR`, and pass DIR."
                    if looks_like_hub else "")
            raise ConfigError(f"--hf-tokenizer '{directory}' is not a local directory.{hint}")
        tokenizers = _require("tokenizers", "--hf-tokenizer")
        self.tokenizer_json = os.path.join(directory, "tokenizer.json")
        self.config_json = os.path.join(directory, "tokenizer_config.json")
        for path in (self.tokenizer_json, self.config_json):
            if not os.path.isfile(path):
                raise IoError(f"--hf-tokenizer '{directory}' has no {os.path.basename(path)} "
                              "(a Hugging Face fast tokenizer directory has tokenizer.json and tokenizer_config.json)")
        try:
            self.tokenizer = tokenizers.Tokenizer.from_file(self.tokenizer_json)
        except Exception as e:  # the Rust side raises a plain Exception for a malformed file
            raise FormatError(f"'{self.tokenizer_json}' is not a tokenizer the tokenizers library can load: {e}") from e
        # What apply_chat_template does: no truncation, no padding, no added special tokens.
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        try:
            with open(self.config_json, encoding="utf-8") as f:
                self.config = json.load(f)
        except ValueError as e:
            raise FormatError(f"'{self.config_json}' is not valid JSON: {e}") from e
        if not isinstance(self.config, dict):
            raise FormatError(f"'{self.config_json}' must hold a JSON object")
        self.chat_template, self.template_source = self._find_template()

        self.special_strings: Dict[str, str] = {}
        for key in self.SPECIAL_KEYS:
            text = _token_text(self.config.get(key))
            if text is not None:
                self.special_strings[key] = text
        extra = self.config.get("additional_special_tokens") or []
        self.additional_special_tokens = [t for t in (_token_text(v) for v in extra) if t is not None]
        self.vocab_size = self.tokenizer.get_vocab_size(with_added_tokens=True)
        # Added tokens marked special (the template's role and end-of-turn markers among them).
        self.special_token_ids: Dict[str, int] = {}
        for token_id, added in sorted(self.tokenizer.get_added_tokens_decoder().items()):
            if added.special:
                self.special_token_ids[added.content] = int(token_id)
        self.special_ids = frozenset(self.special_token_ids.values())
        # Whether every character of a text belongs to one of its tokens: not when a
        # post-processor trims offsets (GPT-2-style ByteLevel with trim_offsets).
        processor = self.tokenizer.post_processor
        self.offsets_tile_text = processor is None or not _trims_offsets(json.loads(processor.__getstate__()))
        self.pieces = _TokenPieces.of(self)

    def _find_template(self) -> Tuple[str, str]:
        """The chat template: tokenizer_config.json's chat_template (a string, or a list of
        named templates of which "default" is used), else chat_template.jinja."""
        value = self.config.get("chat_template")
        if isinstance(value, list):
            named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
            value = named.get("default")
            if value is None:
                raise FormatError(f"'{self.config_json}': chat_template is a list without a template named "
                                  f"\"default\" (it has {sorted(str(n) for n in named)})")
        if isinstance(value, str):
            return value, self.config_json
        jinja_file = os.path.join(self.directory, "chat_template.jinja")
        if value is None and os.path.isfile(jinja_file):
            with open(jinja_file, encoding="utf-8") as f:
                return f.read(), jinja_file
        raise FormatError(f"'{self.config_json}' has no chat_template (and there is no chat_template.jinja): "
                          "this tokenizer does not say how to render a conversation")

    def token_id(self, key: str) -> Optional[int]:
        text = self.special_strings.get(key)
        if text is None:
            return None
        token_id = self.tokenizer.token_to_id(text)
        return None if token_id is None else int(token_id)

    def record(self) -> Dict[str, Any]:
        """What the metadata says about the tokenizer."""
        return {
            "kind": "huggingface",
            "path": os.path.realpath(self.directory),
            "tokenizer_json_sha256": _sha256_file(self.tokenizer_json),
            "tokenizer_config_sha256": _sha256_file(self.config_json),
            "chat_template_sha256": hashlib.sha256(self.chat_template.encode("utf-8")).hexdigest(),
            "chat_template_source": os.path.basename(self.template_source),
            "vocab_size": self.vocab_size,
            "special_tokens": dict(self.special_strings),
            "special_token_ids": dict(self.special_token_ids),
        }


# ---------------------------------------------------------------------------------------
# The Jinja environment


class _Recorder:
    """Collects a rendering's output and the character ranges of its {% generation %} blocks."""

    __slots__ = ("chunks", "length", "spans")

    def __init__(self) -> None:
        self.chunks: List[str] = []
        self.length = 0
        self.spans: List[Tuple[int, int]] = []


def _jinja2_version_refused(version: str) -> bool:
    """True for a jinja2 older than MIN_JINJA2 (or a version text that does not say)."""
    parts = re.findall(r"\d+", version)[:3]
    return len(parts) < 3 or tuple(int(p) for p in parts) < MIN_JINJA2


def _make_environment(now: datetime.datetime) -> Any:
    jinja2 = _require("jinja2", "--hf-tokenizer")
    version = getattr(jinja2, "__version__", "")
    if _jinja2_version_refused(version):
        raise ConfigError(f"--hf-tokenizer renders chat templates only with jinja2 >= "
                          f"{'.'.join(map(str, MIN_JINJA2))} (older versions let a template read the environment "
                          f"through str.format, CVE-2025-27516); this environment has jinja2 {version or '(unknown)'}: "
                          "pip install 'jinja2>=3.1.6'")
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationExtension(Extension):
        """``{% generation %}...{% endgeneration %}``: renders its body unchanged and records
        where it lands in the output. The rendering loop streams the template's output into
        the recorder, so the output so far is everything before the block."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            call = self.call_method("_generation", [nodes.ContextReference()])
            return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _generation(self, context: Any, caller: Callable[[], str]) -> str:
            text = caller()
            recorder = context.get("__tokenfeed_recorder")
            if isinstance(recorder, _Recorder):
                recorder.spans.append((recorder.length, recorder.length + len(text)))
            return text

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format: str) -> str:  # noqa: A002  (the name templates use)
        return now.strftime(format)

    from jinja2.runtime import LoopContext
    from jinja2.utils import Namespace

    # Types whose attributes' safety (is_safe_attribute) depends on the type and the
    # attribute's name only: the sandbox decides with isinstance tests against the type and
    # tests of the name, never looking at the value. The answer for an object of exactly one
    # of these types is remembered, the rest are asked every time.
    memo_types = frozenset((LoopContext, Namespace, dict, list, tuple, str, int, float, bool, type(None)))

    class Environment(ImmutableSandboxedEnvironment):
        """Hugging Face's sandbox, with the same decisions: only remembered where they cannot
        change (``loop.first`` alone asked it for every message, a third of a rendering)."""

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._safe_attributes: Dict[Tuple[type, str], bool] = {}
            self.deadline = float("inf")  # set by ChatTemplate.render for each conversation

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            if time.monotonic() > __self.deadline:
                raise jinja2.exceptions.TemplateError(f"the rendering ran past {MAX_RENDER_SECONDS} s, the "
                                                      "per-conversation limit (MAX_RENDER_SECONDS)")
            return super().call(__context, __obj, *args, **kwargs)

        def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
            kind = type(obj)
            if kind not in memo_types:
                return super().is_safe_attribute(obj, attr, value)
            key = (kind, attr)
            safe = self._safe_attributes.get(key)
            if safe is None:
                safe = self._safe_attributes[key] = super().is_safe_attribute(obj, attr, value)
            return safe

    env = Environment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationExtension, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


class ChatTemplate:
    """The tokenizer directory's chat template, rendered as Hugging Face renders it, and the
    assistant spans of a conversation. ``now`` fixes what ``strftime_now`` returns for the
    whole run, so that a run crossing midnight renders every conversation alike."""

    def __init__(self, hf: HfTokenizer, now: Optional[datetime.datetime] = None) -> None:
        self.hf = hf
        jinja2 = _require("jinja2", "--hf-tokenizer")
        env = self.environment = _make_environment(now or datetime.datetime.now())
        try:
            self.template = env.from_string(hf.chat_template)
        except jinja2.exceptions.TemplateSyntaxError as e:
            raise FormatError(f"'{hf.template_source}': the chat template does not parse: {e} "
                              f"(template line {e.lineno})") from e
        # The template's globals are a ChainMap over the environment's, which every rendering
        # copies into its context twice; the same names and values in one dict copy faster.
        self.template.globals = dict(self.template.globals)
        self.uses_generation = _GENERATION_TAG.search(hf.chat_template) is not None
        # Whether a rendering is a function of the messages, tools and generation prompt alone:
        # always, but for Jinja's random filter and lipsum (the time strftime_now gives is the
        # run's). Then the first n messages of n render as the whole conversation.
        self.deterministic = _RANDOM_NAMES.search(hf.chat_template) is None
        self._variables: Dict[str, Any] = dict(hf.special_strings)
        self._variables["additional_special_tokens"] = list(hf.additional_special_tokens)
        self._template_error = jinja2.exceptions.TemplateError

    def render(self, messages: Sequence[Any], tools: Any = None,
               add_generation_prompt: bool = False) -> Tuple[str, List[Tuple[int, int]]]:
        """The rendering and its {% generation %} character ranges (none for a template
        without {% generation %}). Raises BadRecord."""
        variables = dict(self._variables, messages=list(messages), tools=tools, documents=None,
                         add_generation_prompt=add_generation_prompt)
        self.environment.deadline = deadline = time.monotonic() + MAX_RENDER_SECONDS
        try:
            recorder = _Recorder()
            if self.uses_generation:
                variables["__tokenfeed_recorder"] = recorder
            for chunk in self.template.generate(variables):
                recorder.chunks.append(chunk)
                recorder.length += len(chunk)
                if time.monotonic() > deadline:
                    raise BadRecord("template_error", f"the chat template's rendering ran past {MAX_RENDER_SECONDS} "
                                    "s, the per-conversation limit (MAX_RENDER_SECONDS)")
                if recorder.length > MAX_RENDERED_CHARS:
                    raise BadRecord("template_error", f"the chat template's rendering passed {MAX_RENDERED_CHARS} "
                                    "characters, the per-conversation limit (MAX_RENDERED_CHARS)")
        except self._template_error as e:
            raise BadRecord("template_error", f"the chat template failed: {e}") from e
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
            raise BadRecord("template_error", f"the chat template failed: {type(e).__name__}: {e}") from e
        return "".join(recorder.chunks), recorder.spans

    def assistant_spans(self, messages: Sequence[Dict[str, Any]],
                        tools: Any = None) -> Tuple[str, List[Tuple[int, int]]]:
        """The conversation's rendering and the character ranges to train (see the module's
        doc). Raises BadRecord for an unusable conversation or an inconsistent template."""
        assistants = [k for k, m in enumerate(messages) if m.get("role") == "assistant"]
        trained = [k for k in assistants if messages[k].get("weight", 1) != 0]
        if self.uses_generation:
            text, spans = self.render(messages, tools)
            if len(trained) != len(assistants):
                if len(spans) != len(assistants):
                    raise BadRecord("inconsistent_template",
                                    f"the template's {{% generation %}} blocks ({len(spans)}) do not match the "
                                    f"assistant messages ({len(assistants)}) one to one, so \"weight\": 0 cannot "
                                    "be applied")
                spans = [s for s, k in zip(spans, assistants) if messages[k].get("weight", 1) != 0]
            return text, spans
        text, _ = self.render(messages, tools)
        spans = []
        for k in trained:
            if k == 0:
                raise BadRecord("bad_messages", "message 0 is an assistant message: its reply cannot be told "
                                                "from the template's header without a message before it")
            before, _ = self.render(messages[:k], tools, add_generation_prompt=True)
            if k + 1 == len(messages) and self.deterministic:
                through = text  # the same rendering: of all the messages, without the prompt
            else:
                through, _ = self.render(messages[:k + 1], tools, add_generation_prompt=False)
            for what, prefix in (("with the generation prompt", before), ("", through)):
                if not text.startswith(prefix):
                    n = k if prefix is before else k + 1
                    at = next((i for i, (a, b) in enumerate(zip(prefix, text)) if a != b), min(len(prefix), len(text)))
                    raise BadRecord("inconsistent_template",
                                    f"the template renders the first {n} messages{' ' + what if what else ''} as "
                                    f"text that is not a prefix of the whole conversation's rendering (they differ "
                                    f"at character {at}: {prefix[at:at + 40]!r} vs {text[at:at + 40]!r}), so the "
                                    f"span of assistant message {k} cannot be found; add {{% generation %}} blocks "
                                    "to the template")
            if len(through) < len(before):
                raise BadRecord("inconsistent_template",
                                f"assistant message {k}: the rendering through it is shorter than the rendering "
                                "before it with the generation prompt")
            spans.append((len(before), len(through)))
        return text, spans


# ---------------------------------------------------------------------------------------
# One conversation: ids and mask


def _check_messages(record: Any, field: str) -> Tuple[List[Dict[str, Any]], Any]:
    if not isinstance(record, dict):
        raise BadRecord("bad_messages", f"expected a JSON object, got {type(record).__name__}")
    messages = record.get(field)
    if messages is None:
        raise BadRecord("bad_messages", f"no '{field}' field (set the messages field with --messages-field)")
    if not isinstance(messages, list) or not messages:
        raise BadRecord("bad_messages", f"'{field}' must be a non-empty list of messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRecord("bad_messages", f"message {i} must be an object with a string 'role'")
        weight = m.get("weight", 1)
        if weight not in (0, 1) or isinstance(weight, bool):
            raise BadRecord("bad_messages", f"message {i}: 'weight' must be 0 or 1, got {weight!r}")
    if not any(m["role"] == "assistant" for m in messages):
        raise BadRecord("no_assistant", "the conversation has no assistant message")
    tools = record.get("tools")
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except ValueError as e:
            raise BadRecord("bad_messages", f"'tools' is a string that is not JSON: {e}") from e
    if tools is not None and not isinstance(tools, list):
        raise BadRecord("bad_messages", "'tools' must be a list")
    return messages, tools


def _drop_nulls(value: Any) -> Any:
    """The value with every null-valued key of its objects removed (recursively)."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _split_point(messages: Any, tools: Any, seed: int) -> float:
    """A number in [0, 1) that depends only on the conversation and the seed."""
    canonical = json.dumps({"messages": messages, "tools": tools}, sort_keys=True, ensure_ascii=False,
                           separators=(",", ":"))
    h = hashlib.sha256(_SPLIT_DOMAIN + struct.pack("<Q", seed & 0xFFFFFFFFFFFFFFFF) + canonical.encode("utf-8"))
    top = int.from_bytes(h.digest()[:8], "big")
    return (top >> 11) * 2.0 ** -53


def token_mask(text: str, encoding: Any, spans: Sequence[Tuple[int, int]], special_ids: frozenset,
               trim_after_special: bool, every_char_in_a_token: bool = False,
               ids: Optional[Sequence[int]] = None) -> np.ndarray:
    """The 0/1 mask of the tokens of ``encoding`` (a tokenizers Encoding of ``text``) whose
    characters (offsets) overlap a span, as transformers' ``return_assistant_tokens_mask``
    does. With ``trim_after_special``, a span's trailing whitespace tokens that follow a
    special token of the span are left out (the newline after an end-of-turn token).

    ``every_char_in_a_token``: the offsets tile the text (no post-processor trims them), so a
    span's tokens are those from the one holding its first character to the one holding its
    last, found without converting every offset. ``ids``: ``encoding.ids`` when the caller
    has them already (a conversion that costs as much as the rest of this function)."""
    n = len(encoding)
    if trim_after_special and ids is None:
        ids = encoding.ids
    mask = np.zeros(n, dtype=np.uint8)
    offsets = None
    for a, b in spans:
        if b <= a:
            continue
        first = last = None
        if every_char_in_a_token:
            first, last = encoding.char_to_token(a), encoding.char_to_token(b - 1)
        selected: Union[range, np.ndarray]
        if first is not None and last is not None:
            selected = range(first, last + 1)
        else:
            if offsets is None:
                offsets = np.asarray(encoding.offsets, dtype=np.int64).reshape(n, 2)
            selected = np.flatnonzero((offsets[:, 0] < b) & (offsets[:, 1] > a))
        if len(selected) == 0:
            continue
        if trim_after_special:
            assert ids is not None
            keep = len(selected)
            while keep > 0 and ids[selected[keep - 1]] not in special_ids:
                chars = encoding.token_to_chars(int(selected[keep - 1]))
                if chars is None or text[chars[0]:chars[1]].strip():
                    break
                keep -= 1
            if 0 < keep < len(selected) and ids[selected[keep - 1]] in special_ids:
                selected = selected[:keep]
        if isinstance(selected, range):
            mask[selected.start:selected.stop] = 1
        else:
            mask[selected] = 1
    return mask


class ConversationEncoder:
    """Parses, renders, tokenizes and masks conversations. One per process."""

    def __init__(self, hf_dir: str, messages_field: str, seed: int, val_split: float,
                 now: datetime.datetime) -> None:
        self.hf = HfTokenizer(hf_dir)
        self.template = ChatTemplate(self.hf, now)
        self.messages_field = messages_field
        self.seed = seed
        self.val_split = val_split
        self._tiled = self._untiled = 0  # ASCII texts whose tokens' texts made them up, or not

    def _encode(self, texts: List[str]) -> List[Tuple[List[int], Any]]:
        """The ids of each text and what tells where its tokens lie: the tokenizer's Encoding,
        or for an ASCII text a _Tiling made without the tokenizer's offsets (see _TokenPieces),
        the same ids and the same character ranges."""
        tokenizer, pieces = self.hf.tokenizer, self.hf.pieces
        if pieces is None or self._untiled > max(64, self._tiled // 16):  # the check fails too often to pay
            return [(enc.ids, enc) for enc in tokenizer.encode_batch(texts, add_special_tokens=False)]
        fast = [i for i, text in enumerate(texts) if text.isascii()]
        out: List[Any] = [None] * len(texts)
        if len(fast) < len(texts):
            slow = [i for i, text in enumerate(texts) if not text.isascii()]
            for i, enc in zip(slow, tokenizer.encode_batch([texts[i] for i in slow], add_special_tokens=False)):
                out[i] = (enc.ids, enc)
        for i, enc in zip(fast, tokenizer.encode_batch_fast([texts[i] for i in fast], add_special_tokens=False)):
            ids = enc.ids
            tiling = pieces.tiling(texts[i], ids)
            if tiling is None:  # not seen so far; the tokenizer's own offsets then
                self._untiled += 1
                enc = tokenizer.encode(texts[i], add_special_tokens=False)
                out[i] = (enc.ids, enc)
            else:
                self._tiled += 1
                out[i] = (ids, tiling)
        return out

    def encode_chunk(self, records: Sequence[Tuple[str, Any]]) -> "ChunkResult":
        """Encodes (name, raw) records: raw is a JSON line (str) or an already parsed object."""
        rendered: List[Tuple[int, str, List[Tuple[int, int]], bool]] = []
        result = ChunkResult()
        for index, (name, raw) in enumerate(records):
            try:
                if isinstance(raw, _LineTooLong):
                    raise BadRecord("invalid_json", f"the line is {raw.size} bytes, longer than the limit of "
                                    f"{raw.limit} (max_line_bytes)")
                if isinstance(raw, str):
                    has_null = "null" in raw  # else there is no null to drop
                    try:
                        raw = json.loads(raw)
                    except ValueError as e:
                        raise BadRecord("invalid_json", str(e)) from e
                    except RecursionError as e:  # nested deeper than the interpreter's stack
                        raise BadRecord("invalid_json", "nested too deeply to parse") from e
                else:
                    has_null = True
                if has_null and isinstance(raw, dict):
                    raw = _drop_nulls(raw)
                messages, tools = _check_messages(raw, self.messages_field)
                text, spans = self.template.assistant_spans(messages, tools)
                try:  # JSON's \ud800 escapes decode to lone surrogates, which no tokenizer encodes
                    text.encode("utf-8")
                except UnicodeEncodeError as e:
                    raise BadRecord("invalid_json", f"a string holds a lone surrogate (\\u{ord(text[e.start]):04x}), "
                                    "which is not text") from e
                val = self.val_split > 0 and _split_point(messages, tools, self.seed) < self.val_split
                rendered.append((index, text, spans, val))
            except BadRecord as e:
                result.bad.append((index, name, e.reason, e.detail))
            except RecursionError:  # parsed, but too deep for the null dropping or the template
                result.bad.append((index, name, "invalid_json", "nested too deeply to process"))
        encodings = self._encode([r[1] for r in rendered])
        trim = not self.template.uses_generation
        special = self.hf.special_ids
        # Per split: the ids of its episodes, one after the other (a list of ints, turned into
        # an array once: converting each episode's list on its own costs several times more),
        # their masks and their lengths.
        parts: Dict[bool, Tuple[List[int], List[np.ndarray], List[int]]] = {False: ([], [], []), True: ([], [], [])}
        for (index, text, spans, val), (ids, enc) in zip(rendered, encodings):
            mask = token_mask(text, enc, spans, special, trim, self.hf.offsets_tile_text, ids)
            if not mask.any():
                result.bad.append((index, records[index][0], "empty_mask",
                                   "no token is trained (every assistant message has weight 0 or renders empty)"))
                continue
            tokens, masks, lengths = parts[val]
            tokens += ids
            masks.append(mask)
            lengths.append(len(ids))
        result.bad.sort()
        for val, (tokens, masks, lengths) in parts.items():
            if lengths:
                result.splits[val] = (np.frombuffer(array.array(_UINT32_CODE, tokens), dtype=np.uint32),
                                      np.concatenate(masks), np.asarray(lengths, dtype=np.uint64))
        result.records = len(records)
        return result


class ChunkResult:
    """The encoded episodes of a chunk of records, per split, in input order, and its bad
    records as (index in chunk, name, reason, detail)."""

    def __init__(self) -> None:
        self.splits: Dict[bool, Tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.bad: List[Tuple[int, str, str, str]] = []
        self.records = 0


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


# ---------------------------------------------------------------------------------------
# Inputs


class _LineTooLong:
    """A JSONL line past the limit, in place of its text: ``size`` bytes, ``limit``."""

    def __init__(self, size: int, limit: int) -> None:
        self.size, self.limit = size, limit


class _Input:
    """Streams (name, raw record) chunks from a JSONL (optionally gzip) or parquet file, and
    tracks progress and the file's SHA-256."""

    def __init__(self, path: str, messages_field: str, chunk_records: int,
                 max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self.path = path
        self.max_line_bytes = max_line_bytes
        self.messages_field = messages_field
        self.chunk_records = chunk_records
        if not os.path.exists(path) or os.path.isdir(path):
            raise IoError(f"input '{path}' does not exist or is a directory")
        self.size = os.path.getsize(path)  # 0 for a pipe: no progress fraction
        self.is_parquet = path.endswith(".parquet")
        self.is_gzip = path.endswith(".gz")
        self.format = "parquet" if self.is_parquet else "jsonl.gz" if self.is_gzip else "jsonl"
        self.sha256 = ""
        self.done_bytes = 0
        self.records = 0
        self.blank = 0

    def chunks(self) -> Iterator[List[Tuple[str, Any]]]:
        if self.is_parquet:
            yield from self._parquet_chunks()
        else:
            yield from self._jsonl_chunks()

    def _jsonl_chunks(self) -> Iterator[List[Tuple[str, Any]]]:
        sha = hashlib.sha256()
        try:
            raw = open(self.path, "rb")
        except OSError as e:
            raise IoError(f"cannot read '{self.path}': {e.strerror}") from e
        with raw:
            stream: Any = gzip.GzipFile(fileobj=raw) if self.is_gzip else raw
            chunk: List[Tuple[str, Any]] = []
            line_no = 0
            read = 0
            limit = self.max_line_bytes
            try:
                while True:
                    line = stream.readline(limit + 1)
                    if not line:
                        break
                    line_no += 1
                    read += len(line)
                    if not self.is_gzip:
                        sha.update(line)  # the gzip file's own bytes are hashed at the end
                    record: Any
                    if len(line) > limit and not line.endswith(b"\n"):
                        size = len(line)
                        while not line.endswith(b"\n"):  # the rest of the line, in bounded pieces
                            line = stream.readline(limit)
                            if not line:
                                break
                            size += len(line)
                            read += len(line)
                            if not self.is_gzip:
                                sha.update(line)
                        record = _LineTooLong(size - (1 if line.endswith(b"\n") else 0), limit)
                    else:
                        record = line.decode("utf-8", errors="replace").strip()
                        if not record:
                            self.blank += 1
                            continue
                    self.records += 1
                    chunk.append((f"{self.path}:{line_no}", record))
                    if len(chunk) >= self.chunk_records:
                        self.done_bytes = raw.tell() if self.is_gzip else read  # compressed bytes for gzip
                        yield chunk
                        chunk = []
            except (OSError, EOFError, gzip.BadGzipFile) as e:
                raise FormatError(f"'{self.path}': cannot read past line {line_no}: {e}") from e
            self.done_bytes = self.size if self.is_gzip else read
            if chunk:
                yield chunk
        self.sha256 = _sha256_file(self.path) if self.is_gzip else sha.hexdigest()
        self.size = max(self.size, self.done_bytes)  # a pipe's size is what was read

    def _parquet_chunks(self) -> Iterator[List[Tuple[str, Any]]]:
        pq = _require("pyarrow.parquet", "parquet input")
        try:
            f = pq.ParquetFile(self.path)
        except Exception as e:  # pyarrow raises ArrowInvalid / OSError for a file it cannot read
            raise FormatError(f"'{self.path}' is not a parquet file pyarrow can read: {e}") from e
        names = f.schema_arrow.names
        if self.messages_field not in names:
            raise FormatError(f"'{self.path}' has no column '{self.messages_field}' (its columns: {names}); "
                              "name the messages column with --messages-field")
        columns = [self.messages_field] + (["tools"] if "tools" in names and self.messages_field != "tools" else [])
        total = max(1, f.metadata.num_rows)
        row = 0
        for batch in f.iter_batches(batch_size=self.chunk_records, columns=columns):
            chunk = []
            for record in batch.to_pylist():
                chunk.append((f"{self.path}: row {row}", record))
                row += 1
            self.records += len(chunk)
            self.done_bytes = self.size * row // total
            yield chunk
        self.done_bytes = self.size
        self.sha256 = _sha256_file(self.path)


# ---------------------------------------------------------------------------------------
# The run


class _Staging:
    """PARENT/.NAME.tmp-PID-RANDOM, the directory the dataset is written into, locked with
    flock(2) while this run uses it (the layout and lock of the command's own staging, so that
    either kind of run can tell a live run's directory from a killed run's leftover)."""

    def __init__(self, output_dir: str) -> None:
        import fcntl
        parent = os.path.dirname(output_dir) or "."
        os.makedirs(parent, exist_ok=True)
        self.path = os.path.join(parent, f".{os.path.basename(output_dir)}.tmp-{os.getpid()}-{os.urandom(8).hex()}")
        os.mkdir(self.path)
        self._fd: Optional[int] = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def publish(self, output_dir: str) -> None:
        """Renames it to output_dir (absent or empty) and makes that durable."""
        for root, _, files in os.walk(self.path):
            for name in files:
                _fsync_path(os.path.join(root, name), os.O_RDONLY)
            _fsync_path(root, os.O_RDONLY | os.O_DIRECTORY)
        if os.path.isdir(output_dir):
            os.rmdir(output_dir)  # empty: checked by the caller just before
        os.rename(self.path, output_dir)
        _fsync_path(os.path.dirname(output_dir) or ".", os.O_RDONLY | os.O_DIRECTORY)
        self._unlock()

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        self._unlock()

    def _unlock(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# What a staging directory of a dataset may hold: the splits, their writers' own staging
# directories, the two JSON files.
_STAGING_CONTENT = re.compile(r"(train|val|\.(train|val)\..*|dataset_metadata\.json|tokenizer_state\.json)")


def remove_stale_staging_dirs(output_dir: str) -> List[str]:
    """Removes the staging directories of ``output_dir`` left by runs that are gone (killed):
    named .NAME.tmp-PID[-SUFFIX], PID not a live process (or this one), nobody holding their
    lock, and holding nothing but what a preparation writes. Returns their paths."""
    import fcntl
    parent = os.path.dirname(output_dir) or "."
    pattern = re.compile(r"\." + re.escape(os.path.basename(output_dir)) + r"\.tmp-(\d+)(-[0-9A-Za-z]+)?")
    removed: List[str] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if m is None or not entry.is_dir(follow_symlinks=False):
            continue
        pid = int(m.group(1))
        if pid != os.getpid():
            try:
                os.kill(pid, 0)
                continue  # alive
            except ProcessLookupError:
                pass
            except OSError:
                continue  # alive, another user's, or cannot tell
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live run holds it
            if not all(_STAGING_CONTENT.fullmatch(name) for name in os.listdir(entry.path)):
                continue
            shutil.rmtree(entry.path)
            removed.append(entry.path)
        except OSError as e:
            raise IoError(f"cannot remove '{entry.path}', left by an earlier run that was killed: {e}") from e
        finally:
            os.close(fd)
    return removed


def _fsync_path(path: str, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_output(output_dir: str) -> None:
    if os.path.exists(output_dir):
        if not os.path.isdir(output_dir):
            raise ConfigError(f"output '{output_dir}' exists and is not a directory")
        if os.listdir(output_dir):
            raise ConfigError(f"output directory '{output_dir}' already exists and is not empty; "
                              "remove it or choose another")


def _draw_progress(read: int, total: int, records: int, tokens: int, seconds: float) -> None:
    fraction = min(1.0, read / total) if total else 0.0
    width = 28
    bar = "#" * int(fraction * width) + "." * (width - int(fraction * width))
    rate = records / seconds if seconds > 0 else 0.0
    sys.stderr.write(f"\r\033[K{fraction * 100:3.0f}% [{bar}] {read / 1e6:.1f} / {total / 1e6:.1f} MB  "
                     f"{records} conversations ({rate:.0f}/s)  {tokens} tokens")
    sys.stderr.flush()


def prepare(input: Union[str, "os.PathLike[str]"], output_dir: Union[str, "os.PathLike[str]"], *,  # noqa: A002
            hf_tokenizer: Union[str, "os.PathLike[str]"], val_split: float = 0.0, seed: int = 0,
            shard_tokens: int = 0, token_dtype: str = "auto", on_error: str = "fail",
            messages_field: str = "messages", workers: int = 0, progress: bool = False,
            chunk_records: int = 256, max_line_bytes: int = MAX_LINE_BYTES) -> Dict[str, Any]:
    """Prepares ``output_dir`` (train/, val/, dataset_metadata.json, tokenizer_state.json)
    from ``input`` with the tokenizer directory ``hf_tokenizer`` (see the module's doc).

    ``workers``: processes that render and tokenize (0: one per core; 1: this process only);
    the dataset is the same whatever the number. ``on_error``: ``fail`` stops at the first
    bad conversation, naming it; ``skip`` counts it under its reason (a JSONL line longer
    than ``max_line_bytes``, default 64 MiB, is an invalid_json record). All or nothing: the
    output is written to a hidden directory beside ``output_dir`` and renamed at the end.
    Returns the summary that the metadata records.
    """
    started = time.monotonic()
    input_path, output = os.fspath(input), os.path.abspath(os.fspath(output_dir)).rstrip(os.sep)
    hf_dir = os.fspath(hf_tokenizer)
    if on_error not in ("fail", "skip"):
        raise ConfigError(f"on_error must be 'fail' or 'skip', got {on_error!r}")
    if not (0.0 <= val_split < 1.0):
        raise ConfigError(f"val split must be in [0, 1) (train needs conversations), got {val_split}")
    if token_dtype not in ("auto", "uint16", "uint32"):
        raise ConfigError(f"token dtype must be auto, uint16 or uint32, got {token_dtype!r}")
    if shard_tokens < 0 or chunk_records < 1 or workers < 0:
        raise ConfigError("shard_tokens and workers must be >= 0 and chunk_records >= 1")
    now = datetime.datetime.now()
    encoder = ConversationEncoder(hf_dir, messages_field, int(seed), float(val_split), now)
    hf = encoder.hf
    vocab_size = hf.vocab_size
    dtype = token_dtype if token_dtype != "auto" else ("uint16" if vocab_size <= 65536 else "uint32")
    if dtype == "uint16" and vocab_size > 65536:
        raise ConfigError(f"token dtype uint16 cannot hold a vocabulary of {vocab_size} tokens; use uint32 or auto")
    if max_line_bytes < 1:
        raise ConfigError(f"max_line_bytes must be >= 1, got {max_line_bytes}")
    source = _Input(input_path, messages_field, chunk_records, max_line_bytes)
    _check_output(output)
    if workers == 0:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

    skipped = {reason: 0 for reason in REASONS}
    first_skipped: Dict[str, str] = {}
    tokens_written = 0
    conversations = 0
    episodes = {False: 0, True: 0}
    removed_stale = remove_stale_staging_dirs(output)
    staging: Optional[_Staging] = _Staging(output)
    pool = None
    writers: Dict[bool, DatasetWriter] = {}
    try:
        writers.update({False: DatasetWriter(os.path.join(staging.path, "train"), dtype, shard_tokens=shard_tokens),
                        True: DatasetWriter(os.path.join(staging.path, "val"), dtype, shard_tokens=shard_tokens)})

        def consume(result: ChunkResult) -> None:
            nonlocal tokens_written, conversations
            for _, name, reason, detail in result.bad:
                if on_error == "fail":
                    raise FormatError(f"{name}: {reason}: {detail}")
                skipped[reason] += 1
                first_skipped.setdefault(reason, f"{name}: {detail}")
            for val, (ids, mask, lengths) in result.splits.items():
                writers[val].add_many(ids, lengths, mask)
                tokens_written += len(ids)
                conversations += len(lengths)
                episodes[val] += len(lengths)

        last_draw = 0.0

        def report(force: bool = False) -> None:
            nonlocal last_draw
            t = time.monotonic()
            if progress and (force or t - last_draw >= 0.2):
                last_draw = t
                _draw_progress(source.done_bytes, source.size, source.records, tokens_written, t - started)

        if workers <= 1:
            for chunk in source.chunks():
                consume(encoder.encode_chunk(chunk))
                report()
        else:
            import multiprocessing
            ctx = multiprocessing.get_context("fork")
            pool = ctx.Pool(workers, _worker_init, (encoder,))
            in_flight: collections.deque = collections.deque()
            for chunk in source.chunks():
                in_flight.append(pool.apply_async(_worker_encode, (chunk,)))
                while len(in_flight) > 2 * workers + 2:
                    consume(in_flight.popleft().get())
                    report()
            while in_flight:
                consume(in_flight.popleft().get())
                report()
            pool.close()
            pool.join()
            pool = None
        report(force=True)
        if progress:
            sys.stderr.write("\r\033[K")

        if conversations == 0:
            raise FormatError(f"{input_path}: no conversation to write ({source.records} records, "
                              f"{sum(skipped.values())} skipped); the train split needs at least one")
        splits = {}
        for val, name in ((False, "train"), (True, "val")):
            w = writers[val]
            if episodes[val] == 0:  # the loader refuses an empty split: leave it out
                w.discard()
                splits[name] = {"episodes": 0, "tokens": 0, "masked_tokens": 0, "shards": 0}
                continue
            summary = w.finish()
            splits[name] = {k: int(summary[k]) for k in ("episodes", "tokens", "masked_tokens", "shards")}
        if splits["train"]["episodes"] == 0:
            raise FormatError(f"{input_path}: all {conversations} conversations landed in val (val split "
                              f"{val_split:g}); the train split needs at least one: lower the val split or add "
                              "conversations")

        eos_id = hf.token_id("eos_token")
        pad_id = hf.token_id("pad_token")
        eot_id = _end_of_turn_id(encoder)
        if eot_id is None:
            eot_id = eos_id
        record = hf.record()
        summary_out = {
            "splits": splits,
            "source": {"file": os.path.basename(input_path), "format": source.format, "sha256": source.sha256,
                       "bytes": source.size, "records": source.records, "blank_lines": source.blank},
            "chat_template": {"kind": "huggingface",
                              "sha256": record["chat_template_sha256"],
                              "loss_mask": ("the template's {% generation %} blocks" if encoder.template.uses_generation
                                            else "prefix renderings: assistant reply and its end-of-turn tokens"),
                              "strftime_now": now.isoformat(timespec="seconds")},
            "tokenizer": record,
            "split": {"rule": "tokenfeed-hf-split-v1 (sha256 of seed and the canonical JSON of messages and tools)",
                      "seed": int(seed), "val_split": float(val_split)},
            "on_error": on_error,
            "skipped": skipped,
        }
        write_dataset_metadata(staging.path, token_dtype=dtype, mask_dtype="uint8", eot_token_id=eot_id,
                               eos_token_id=eos_id, pad_token_id=pad_id, vocab_size=vocab_size,
                               special_token_ids=dict(hf.special_token_ids),
                               bos_token_id=hf.token_id("bos_token"), **summary_out,
                               created_by="tokenfeed prepare --hf-tokenizer", tokenfeed_version=__version__)
        with open(os.path.join(staging.path, "tokenizer_state.json"), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)
            f.write("\n")
        _check_output(output)
        staging.publish(output)
        staging = None
        summary_out["first_skipped"] = first_skipped
        summary_out["conversations"] = conversations
        summary_out["tokens"] = tokens_written
        summary_out["token_dtype"] = dtype
        summary_out["vocab_size"] = vocab_size
        summary_out["eot_token_id"] = eot_id
        summary_out["seconds"] = time.monotonic() - started
        summary_out["output_dir"] = output
        summary_out["removed_stale_dirs"] = removed_stale
        return summary_out
    finally:
        if pool is not None:
            # On failure the workers finish the few chunks in flight and exit: not terminate(),
            # whose first step takes the task queue's lock, which an idle worker holds while it
            # waits for a task, so that it waited for ever (the command hung on a bad first
            # line whenever the other worker was already waiting).
            pool.close()
            pool.join()
        if staging is not None:
            for w in writers.values():
                w.discard()
            staging.remove()


def _end_of_turn_id(encoder: ConversationEncoder) -> Optional[int]:
    """The special token that closes an assistant turn: the last special token the mask trains
    in a probe conversation, if the template renders one."""
    probe = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    for messages in (probe, [{"role": "system", "content": "S"}] + probe):
        try:
            text, spans = encoder.template.assistant_spans(messages)
        except BadRecord:
            continue
        enc = encoder.hf.tokenizer.encode(text, add_special_tokens=False)
        mask = token_mask(text, enc, spans, encoder.hf.special_ids, not encoder.template.uses_generation,
                          encoder.hf.offsets_tile_text)
        trained_special = [i for i, m in zip(enc.ids, mask) if m and i in encoder.hf.special_ids]
        if trained_special:
            return int(trained_special[-1])
    return None


# ---------------------------------------------------------------------------------------
# The command


def _print_summary(s: Dict[str, Any], input_path: str) -> None:
    out = [f"tokenfeed prepare: wrote {s['output_dir']}",
           f"  input      {input_path} ({s['source']['format']}, {s['source']['records']} records, "
           f"sha256 {s['source']['sha256'][:16]}...)"]
    for name in ("train", "val"):
        sp = s["splits"][name]
        label = f"  {name:<5}      "
        if sp["episodes"] == 0:
            out.append(label + "no conversations (not written)")
        else:
            out.append(label + f"{sp['episodes']} conversations, {sp['tokens']} tokens ({sp['masked_tokens']} "
                       f"trained on), {sp['shards']} shards")
    for path in s["removed_stale_dirs"]:
        out.append(f"  removed    {path} (left by an earlier run that was killed)")
    out.append(f"  skipped    {sum(s['skipped'].values())} records")
    for reason, count in s["skipped"].items():
        if count:
            out.append(f"    {reason}: {count} (first: {s['first_skipped'][reason]})")
    t = s["tokenizer"]
    out.append(f"  tokenizer  {t['path']} (vocab {s['vocab_size']}, token dtype {s['token_dtype']}, "
               f"eot id {s['eot_token_id']}); mask from {s['chat_template']['loss_mask']}")
    rate = s["conversations"] / s["seconds"] if s["seconds"] > 0 else 0.0
    out.append(f"  time       {s['seconds']:.2f} s ({rate:.0f} conversations/s)")
    print("\n".join(out), flush=True)



def main(argv: Optional[Sequence[str]] = None) -> int:
    """``tokenfeed prepare --hf-tokenizer``: exit status 0, or 2 (a bad option, value or
    tokenizer directory, a missing package), 3 (a file that cannot be read or written), 4 (a bad
    conversation under --on-error fail, or none for train), 6 (anything else)."""
    parser = argparse.ArgumentParser(
        prog="tokenfeed prepare --hf-tokenizer",
        description="Prepare an SFT dataset with a Hugging Face tokenizer directory and its chat template.")
    parser.add_argument("--input", required=True, help="JSONL (.gz accepted) or .parquet file of conversations")
    parser.add_argument("--output-dir", required=True, help="dataset directory to create (must not exist, or be empty)")
    parser.add_argument("--hf-tokenizer", required=True,
                        help="local directory with tokenizer.json and tokenizer_config.json (chat_template)")
    parser.add_argument("--messages-field", default="messages", help="the field holding the messages")
    parser.add_argument("--val-split", type=float, default=0.1, help="fraction of conversations in val (default 0.1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shard-tokens", type=int, default=0)
    parser.add_argument("--token-dtype", choices=("auto", "uint16", "uint32"), default="auto")
    parser.add_argument("--on-error", choices=("fail", "skip"), default="fail")
    parser.add_argument("--workers", type=int, default=0, help="processes (0: one per core)")
    parser.add_argument("--max-line-bytes", type=int, default=MAX_LINE_BYTES,
                        help="the longest JSONL line read (default 64 MiB); a longer one is invalid_json")
    args = parser.parse_args(argv)

    def run() -> Dict[str, Any]:
        return prepare(args.input, args.output_dir, hf_tokenizer=args.hf_tokenizer, val_split=args.val_split,
                       seed=args.seed, shard_tokens=args.shard_tokens, token_dtype=args.token_dtype,
                       on_error=args.on_error, messages_field=args.messages_field, workers=args.workers,
                       progress=sys.stderr.isatty(), max_line_bytes=args.max_line_bytes)

    status, summary = run_command(run, lambda name: f"prepare interrupted by {name}; removed its temporary output, "
                                                    f"'{args.output_dir}' was not written")
    if status != 0:
        return status
    _print_summary(summary, args.input)
    return 0


if __name__ == "__main__":
    sys.exit(main())
