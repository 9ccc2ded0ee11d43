"""Rendering chat templates as transformers' ``apply_chat_template`` renders them.

A template is Jinja run in an immutable sandbox with ``trim_blocks`` and ``lstrip_blocks``, the
``loopcontrols`` extension and the helpers Hugging Face templates call: ``raise_exception``,
``strftime_now``, a ``tojson`` filter that neither escapes HTML nor sorts keys, a ``dict``
maker and a ``namespace`` that refuses names starting with an underscore. Its variables:
``messages``, ``tools``, ``documents`` (None), ``add_generation_prompt``, the tokenizer's special
tokens (``bos_token``, ``eos_token``, ``pad_token``) and the caller's keyword arguments, which win.

``strftime_now`` formats a fixed instant, not the clock: data must not depend on when it is
read, and a restored run re-derives the records it held. The instant is 2024-01-01 00:00 unless
``chat_template_kwargs={"strftime_now": "2025-06-30T09:00"}`` names another.

``{% generation %}...{% endgeneration %}`` marks what the assistant generates. The block wraps
its output in two noncharacters (U+FDD0, U+FDD1), removed after rendering, whose positions give
the spans in the final text (transformers counts the characters yielded so far instead, which
goes wrong inside a macro or a ``set`` block, whose output is buffered). A conversation that
holds those characters itself is refused: it would confuse the markers.

Where a template comes from (``find_template``): ``chat_template=`` (a template, a file, or the
name of one of the tokenizer's templates), else the tokenizer's own: a transformers tokenizer's
``chat_template``, or a tokenizer directory's ``chat_template.jinja``,
``additional_chat_templates/*.jinja`` and ``tokenizer_config.json``'s ``chat_template`` (a string
or a list of named templates), as transformers loads them. With several templates ``default``
serves, and ``tool_use`` serves records that carry tools.
"""

from __future__ import annotations

import contextvars
import glob
import json
import os
import re
from datetime import datetime
from functools import lru_cache
from typing import Any

OPEN, CLOSE = "\ufdd0", "\ufdd1"
_TAGGED = re.compile(r"\{%-?\s*generation\s*-?%\}")
_MIN_JINJA = (3, 1, 6)  # older releases have known sandbox escapes; templates are untrusted
DEFAULT_NOW = "2024-01-01T00:00:00"
# generation blocks entered by the render running in this context (thread-safe counter)
_CALLS: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "zephon_generation_blocks", default=None)


class TemplateRefused(ValueError):
    """A template could not render a conversation (it raised, or met a value it cannot use):
    a fault of that record, reported where the record is named."""


def _jinja() -> Any:
    try:
        import jinja2
    except ImportError:
        raise ImportError("tokenize_chat renders chat templates with jinja2: pip install "
                          "'zephon[chat]' (jinja2>=3.1.6)") from None
    version = tuple(int(x) for x in re.findall(r"\d+", jinja2.__version__)[:3])
    if version < _MIN_JINJA:
        raise ImportError(f"tokenize_chat needs jinja2>=3.1.6 (its sandbox fixes), found "
                          f"{jinja2.__version__}")
    return jinja2


def _refuse_private(name: Any) -> None:
    if isinstance(name, str) and name.startswith("_"):
        import jinja2

        raise jinja2.exceptions.SecurityError(
            f"a chat template may not set the attribute {name!r} on a namespace")


class _DictMaker:
    """``dict(...)`` and ``dict.fromkeys(...)`` for templates, without the ``dict`` type."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, keys: Any, value: Any = None) -> dict:
        return dict.fromkeys(keys, value)


def _tojson(value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    # Jinja's own tojson escapes <, >, & and ' for HTML and sorts keys: templates expect neither
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


@lru_cache(maxsize=1)
def _environment() -> Any:
    jinja2 = _jinja()
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationBlocks(Extension):
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_marked"), [], [], body).set_lineno(lineno)

        def _marked(self, caller: Any) -> str:
            calls = _CALLS.get()
            if calls is not None:
                calls[0] += 1
            return OPEN + caller() + CLOSE

    class Namespace(jinja2.utils.Namespace):
        """The sandbox does not look at ``{% set ns.attr %}``: underscore names are refused
        here, as they lead to Python internals."""

        def __setitem__(self, name: str, value: Any) -> None:
            _refuse_private(name)
            super().__setitem__(name, value)

    def namespace(*args: Any, **kwargs: Any) -> Any:
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _refuse_private(name)
        return Namespace(attrs)

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlocks, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=raise_exception, dict=_DictMaker(), namespace=namespace)
    return env


@lru_cache(maxsize=64)
def _compiled(source: str) -> Any:
    return _environment().from_string(source)


def has_generation_tags(source: str) -> bool:
    return bool(_TAGGED.search(source))


# asked once per conversation: a search of the whole template each time cost as much as a
# tenth of its rendering
_tagged = lru_cache(maxsize=64)(has_generation_tags)
_instant = lru_cache(maxsize=8)(datetime.fromisoformat)


class ChatTemplate:
    """A tokenizer's chat template(s) and the variables every rendering gets. Picklable (the
    compiled form is cached per process)."""

    def __init__(self, source: str | dict[str, str], variables: dict[str, Any] | None = None
                 ) -> None:
        self.sources = {"default": source} if isinstance(source, str) else dict(source)
        variables = dict(variables or {})
        self.now = str(variables.pop("strftime_now", DEFAULT_NOW))
        datetime.fromisoformat(self.now)  # a bad instant fails when the pipeline is built
        self.variables = variables
        for name, text in self.sources.items():
            try:
                _compiled(text)
            except Exception as e:
                if type(e).__module__.startswith("jinja2"):
                    raise ValueError(f"chat template {name!r} does not compile: {e}") from None
                raise

    def source(self, has_tools: bool = False) -> str:
        if has_tools and "tool_use" in self.sources:
            return self.sources["tool_use"]
        if "default" in self.sources:
            return self.sources["default"]
        if len(self.sources) == 1:
            return next(iter(self.sources.values()))
        raise ValueError(f"the tokenizer has several chat templates {sorted(self.sources)} and "
                         "none is 'default': pass chat_template= with the name of one")

    def tagged(self, has_tools: bool = False) -> bool:
        return _tagged(self.source(has_tools))

    def render(self, messages: list, *, tools: Any = None, add_generation_prompt: bool = False,
               extra: dict[str, Any] | None = None) -> tuple[str, list[tuple[int, int]]]:
        """(text, generation spans as [start, end) character ranges of the text)."""
        template = _compiled(self.source(bool(tools)))
        now = _instant(self.now)
        variables = {**self.variables, **(extra or {})}
        calls = [0]
        token = _CALLS.set(calls)
        try:
            text = template.render(messages=messages, tools=tools, documents=None,
                                   add_generation_prompt=add_generation_prompt,
                                   **variables, strftime_now=now.strftime)
        except Exception as e:
            if isinstance(e, (RecursionError, MemoryError)):
                raise
            detail = f"{type(e).__name__}: {e}" if not type(e).__module__.startswith(
                "jinja2") else str(e)
            raise TemplateRefused(f"the chat template refused it ({detail})") from None
        finally:
            _CALLS.reset(token)
        return _unmarked(text, calls[0])


def _unmarked(text: str, blocks: int) -> tuple[str, list[tuple[int, int]]]:
    """The text without its generation markers, and the marked spans (nested blocks merge)."""
    if not blocks and OPEN not in text and CLOSE not in text:
        return text, []
    if text.count(OPEN) != blocks or text.count(CLOSE) != blocks:
        raise TemplateRefused("it holds U+FDD0 or U+FDD1, noncharacters Zephon reserves to mark "
                              "generation spans")
    pieces, spans, depth, length, at, start = [], [], 0, 0, 0, 0
    while True:  # two finds per marker: a few per conversation
        o, c = text.find(OPEN, at), text.find(CLOSE, at)
        if o < 0 and c < 0:
            break
        m = c if o < 0 or 0 <= c < o else o
        pieces.append(text[at:m])
        length += m - at
        if m == o:
            depth += 1
            if depth == 1:
                start = length
        else:
            depth -= 1
            if depth == 0:
                spans.append((start, length))
        at = m + 1
    pieces.append(text[at:])
    return "".join(pieces), spans


# -- where templates come from ---------------------------------------------------------------


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _directory_templates(directory: str) -> str | dict[str, str] | None:
    """A tokenizer directory's templates, as transformers' loader finds them."""
    found: dict[str, str] = {}
    single = os.path.join(directory, "chat_template.jinja")
    if os.path.isfile(single):
        found["default"] = _read(single)
    for path in sorted(glob.glob(os.path.join(directory, "additional_chat_templates", "*.jinja"))):
        found[os.path.basename(path)[: -len(".jinja")]] = _read(path)
    if not found:
        config_path = os.path.join(directory, "tokenizer_config.json")
        config = json.loads(_read(config_path)) if os.path.isfile(config_path) else {}
        value = config.get("chat_template") if isinstance(config, dict) else None
        if isinstance(value, str):
            return value
        if isinstance(value, list):
            return {t["name"]: t["template"] for t in value
                    if isinstance(t, dict) and "name" in t and "template" in t} or None
        return None
    return found["default"] if list(found) == ["default"] else found


def own_templates(tokenizer: Any, directory: str | None) -> str | dict[str, str] | None:
    """The tokenizer's own template(s): a transformers tokenizer's attribute, else its
    directory's files (None: it has none)."""
    value = getattr(tokenizer, "chat_template", None) if tokenizer is not None else None
    if isinstance(value, (str, dict)) and value:
        return value
    if directory and os.path.isdir(directory):
        return _directory_templates(directory)
    return None


def find_template(chat_template: Any, own: str | dict[str, str] | None, label: str
                  ) -> str | dict[str, str]:
    """The template(s) to render with: ``chat_template=`` as a file, a name among the
    tokenizer's templates, or a template; else the tokenizer's own."""
    if chat_template is None:
        if own is None:
            raise ValueError(f"tokenizer {label} has no chat template: pass chat_template= (a "
                             "Jinja template, or the path of a .jinja file)")
        return own
    if isinstance(chat_template, os.PathLike):
        return _read(os.fspath(chat_template))
    if not isinstance(chat_template, str):
        raise TypeError(f"chat_template must be a string or a path, got {type(chat_template).__name__}")
    if isinstance(own, dict) and chat_template in own:
        return own[chat_template]
    if "{{" in chat_template or "{%" in chat_template:
        return chat_template
    if os.path.isfile(os.path.expanduser(chat_template)):
        return _read(os.path.expanduser(chat_template))
    names = f" (its templates: {sorted(own)})" if isinstance(own, dict) else ""
    raise ValueError(f"chat_template {chat_template!r} is neither a Jinja template, a file, nor "
                     f"a template of tokenizer {label}{names}")


def special_strings(tokenizer: Any, loaded: Any) -> dict[str, str]:
    """The special tokens a template sees (``bos_token``...), as transformers passes them."""
    smap = getattr(tokenizer, "special_tokens_map", None)
    if isinstance(smap, dict):
        return {k: v for k, v in smap.items() if isinstance(v, str)}
    directory = loaded.spec.label
    if loaded.spec.kind == "json" and os.path.isdir(directory):
        from zephon.tokens.special_tokens import declared_tokens

        declared = declared_tokens(directory) or {}
        return {f"{r}_token": v for r, v in declared.items() if v is not None}
    if loaded.spec.kind == "fallback":
        from zephon.tokens.fallback_tokenizer import FallbackTokenizer as F

        return {"bos_token": F.bos_token, "eos_token": F.eos_token, "pad_token": F.pad_token}
    backend = loaded.backend
    ids = {"bos_token": loaded.bos_token_id, "eos_token": loaded.eos_token_id,
           "pad_token": loaded.pad_token_id}
    return {k: backend.id_to_token(i) for k, i in ids.items() if i is not None}


def template_for(tokenizer: Any, loaded: Any, chat_template: Any, variables: dict) -> ChatTemplate:
    """The template(s) ``tokenize_chat`` renders with, for a loaded tokenizer
    (``zephon.tokens.tokenizer_source``) and the object or path it was loaded from."""
    from zephon.tokens.tokenizer_source import FALLBACK

    directory = loaded.spec.label if loaded.spec.kind == "json" else None
    label = FALLBACK if loaded.spec.kind == "fallback" else loaded.spec.label
    own = own_templates(tokenizer, directory)
    return ChatTemplate(find_template(chat_template, own, label), variables)
