"""A local Hugging Face tokenizer directory: the one reading of ``tokenizer.json`` and
``tokenizer_config.json`` (``load_tokenizer_dir``) that ``tokenfeed.prepare`` (``HfTokenizer``:
the chat template and the special tokens too) and ``tokenfeed.prepare_text``
(``text_corpus.HfTextEncoder``) share, and the optional packages' import."""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
from typing import Any, Dict, Optional, Tuple, Union

from ._tokenfeed import ConfigError, FormatError, IoError
from ._token_pieces import _TokenPieces

EXTRA_HINT = "pip install 'tokenfeed[hf]' (the packages tokenizers, jinja2 and, for parquet input, pyarrow)"


def require(module: str, what: str) -> Any:
    """Imports an optional dependency, or raises ConfigError saying what to install."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ConfigError(f"{what} needs the Python package '{module.split('.')[0]}', which is not installed "
                          f"({e}); install it with: {EXTRA_HINT}") from e


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def token_text(value: Any) -> Optional[str]:
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


class TokenizerDir:
    """What a tokenizer directory holds, read once: the fast tokenizer from tokenizer.json
    (set as ``apply_chat_template`` uses it: no truncation, no padding) and the JSON object of
    tokenizer_config.json (``{}`` when it is optional and absent)."""

    def __init__(self, directory: Union[str, "os.PathLike[str]"], config_required: bool) -> None:
        self.directory = os.fspath(directory)
        _check_directory(self.directory)
        tokenizers = require("tokenizers", "--hf-tokenizer")
        self.tokenizers_version = f"tokenizers {tokenizers.__version__}"
        self.tokenizer_json, self.config_json = tokenizer_files(self.directory, config_required)
        try:
            self.tokenizer = tokenizers.Tokenizer.from_file(self.tokenizer_json)
        except Exception as e:  # the Rust side raises a plain Exception for a malformed file
            raise FormatError(f"'{self.tokenizer_json}' is not a tokenizer the tokenizers library can load: {e}") from e
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.config: Dict[str, Any] = {}
        if os.path.isfile(self.config_json):
            try:
                with open(self.config_json, encoding="utf-8") as f:
                    self.config = json.load(f)
            except ValueError as e:
                raise FormatError(f"'{self.config_json}' is not valid JSON: {e}") from e
            if not isinstance(self.config, dict):
                raise FormatError(f"'{self.config_json}' must hold a JSON object")


def tokenizer_files(directory: str, config_required: bool) -> Tuple[str, str]:
    """The paths of ``directory``'s tokenizer.json and tokenizer_config.json; ConfigError when
    it is not a local directory, IoError when it lacks tokenizer.json (or, when
    ``config_required``, tokenizer_config.json). Needs no package: the native encoder's run
    (text_corpus) checks a directory by it too."""
    _check_directory(directory)
    tokenizer_json = os.path.join(directory, "tokenizer.json")
    config_json = os.path.join(directory, "tokenizer_config.json")
    for path in (tokenizer_json, config_json) if config_required else (tokenizer_json,):
        if not os.path.isfile(path):
            raise IoError(f"--hf-tokenizer '{directory}' has no {os.path.basename(path)} "
                          "(a Hugging Face fast tokenizer directory has tokenizer.json and tokenizer_config.json)")
    return tokenizer_json, config_json


def _check_directory(directory: str) -> None:
    if not os.path.isdir(directory):
        raise ConfigError(f"--hf-tokenizer '{directory}' is not a local directory{_hub_hint(directory)}")


def _hub_hint(directory: str) -> str:
    """What follows "is not a local directory": how to fetch the files when ``directory``
    looks like a Hub name (``org/model``), else that only local files are read."""
    if re.fullmatch(r"[\w.-]+/[\w.-]+", directory) is None or os.path.exists(directory):
        return " (tokenfeed reads local files only; fetch tokenizer.json and tokenizer_config.json first)"
    return (". It looks like a Hugging Face Hub name: tokenfeed reads local files only and downloads nothing; "
            f"fetch the tokenizer first, e.g. `huggingface-cli download {directory} tokenizer.json "
            "tokenizer_config.json --local-dir DIR`, and pass DIR.")


class HfTokenizer:
    """A local Hugging Face tokenizer directory: the fast tokenizer, the chat template and the
    special tokens. Read-only after construction."""

    SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")

    def __init__(self, directory: Union[str, "os.PathLike[str]"]) -> None:
        files = TokenizerDir(directory, config_required=True)
        self.directory, self.tokenizer, self.config = files.directory, files.tokenizer, files.config
        self.tokenizer_json, self.config_json = files.tokenizer_json, files.config_json
        self.chat_template, self.template_source = self._find_template()

        self.special_strings: Dict[str, str] = {}
        for key in self.SPECIAL_KEYS:
            text = token_text(self.config.get(key))
            if text is not None:
                self.special_strings[key] = text
        extra = self.config.get("additional_special_tokens") or []
        self.additional_special_tokens = [t for t in (token_text(v) for v in extra) if t is not None]
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
            "tokenizer_json_sha256": sha256_file(self.tokenizer_json),
            "tokenizer_config_sha256": sha256_file(self.config_json),
            "chat_template_sha256": hashlib.sha256(self.chat_template.encode("utf-8")).hexdigest(),
            "chat_template_source": os.path.basename(self.template_source),
            "vocab_size": self.vocab_size,
            "special_tokens": dict(self.special_strings),
            "special_token_ids": dict(self.special_token_ids),
        }

