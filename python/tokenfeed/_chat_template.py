"""A model's Jinja chat template rendered as Hugging Face renders it (a sandboxed environment
with its filters and globals, ``{% generation %}`` recorded, bounded in size and time), and
the character ranges of a conversation that the assistant-only loss mask trains."""
from __future__ import annotations

import datetime
import json
import re
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ._bad_record import BadRecord
from ._hf_tokenizer import HfTokenizer, require
from ._tokenfeed import ConfigError, FormatError

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

_GENERATION_TAG = re.compile(r"{%-?\s*generation\s*-?%}")
_RANDOM_NAMES = re.compile(r"random|lipsum")


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


def _generation_extension(jinja2: Any) -> type:
    """The ``{% generation %}`` extension class of this jinja2."""
    from jinja2 import nodes
    from jinja2.ext import Extension

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

    return GenerationExtension


def _sandbox(jinja2: Any) -> type:
    """Hugging Face's sandboxed environment class, bounded in time per rendering."""
    from jinja2.runtime import LoopContext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
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

    return Environment


def _make_environment(now: datetime.datetime) -> Any:
    """The sandboxed environment templates render in, with Hugging Face's filters and globals
    (``strftime_now`` answering ``now``)."""
    jinja2 = require("jinja2", "--hf-tokenizer")
    version = getattr(jinja2, "__version__", "")
    if _jinja2_version_refused(version):
        raise ConfigError(f"--hf-tokenizer renders chat templates only with jinja2 >= "
                          f"{'.'.join(map(str, MIN_JINJA2))} (older versions let a template read the environment "
                          f"through str.format, CVE-2025-27516); this environment has jinja2 {version or '(unknown)'}: "
                          "pip install 'jinja2>=3.1.6'")
    from jinja2.ext import loopcontrols

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format: str) -> str:  # noqa: A002  (the name templates use)
        return now.strftime(format)

    env = _sandbox(jinja2)(trim_blocks=True, lstrip_blocks=True,
                           extensions=[_generation_extension(jinja2), loopcontrols])
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
        jinja2 = require("jinja2", "--hf-tokenizer")
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

