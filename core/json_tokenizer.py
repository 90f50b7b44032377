"""A model folder's ``tokenizer.json`` and chat template, read by the ``tokenizers`` library and
jinja2 alone: no transformers import (seconds of every process's start, in the harness's client
and in every reference server: the figure is below).

It answers the part of a Hugging Face fast tokenizer the harness uses (``__call__`` and
``decode`` with and without special tokens, ``convert_ids_to_tokens``, the special ids,
``apply_chat_template`` with ``tokenize=False``), computed the way transformers computes it: the
same Rust tokenizer, and the chat template rendered in a sandboxed jinja2 environment with the
settings transformers documents for chat templates (``trim_blocks``, ``lstrip_blocks``, loop
controls, a ``tojson`` filter that keeps non-ASCII text, ``raise_exception``, ``strftime_now``;
the special tokens as variables). :func:`json_tokenizer` returns None for a folder outside that
part (a list of named templates, a template using transformers' own ``generation`` tag, a
tokenizer that cleans up spaces after decoding), which then goes through transformers.
tests/core/test_tokenizer.py checks the two give the same ids and text for the store's models.

Why not transformers' AutoTokenizer for every folder: its import. ``benchmarks/process_start.py
--only tokenizer`` (a fresh process that loads the store's tiny-random tokenizer; median of 5,
wall time), 2026-12-05, 2-core x86_64 with the engines installed (transformers imports torch),
busy: 0.5 s this way, 5.4 s through AutoTokenizer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Optional, Union

# the tokens a template sees by name, in the order transformers lists them as special
NAMED_SPECIAL = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def _token_text(value: Any) -> Optional[str]:
    """A special token as tokenizer_config.json writes it: a string, or an AddedToken dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _read_template(folder: Path, config: dict[str, Any]) -> tuple[bool, Optional[str]]:
    """(usable, template): the folder's chat template (chat_template.jinja, else the config's)."""
    path = folder / "chat_template.jinja"
    if path.is_file():
        return True, path.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if template is None or isinstance(template, str):
        return True, template
    return False, None  # named templates: transformers chooses among them


def _environment() -> Any:
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        from jinja2.exceptions import TemplateError

        raise TemplateError(message)

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: Optional[int] = None,
        separators: Optional[tuple[str, str]] = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


class JsonTokenizer:
    """What the harness asks of a fast tokenizer, from tokenizer.json (see the module docstring)."""

    def __init__(self, backend: Any, config: dict[str, Any], chat_template: Optional[str], compiled: Any):
        self.backend_tokenizer = backend
        self.chat_template = chat_template
        self._compiled = compiled
        self.special_tokens_map = {k: t for k in NAMED_SPECIAL if (t := _token_text(config.get(k))) is not None}
        extra = config.get("extra_special_tokens", config.get("additional_special_tokens")) or []
        extra_texts = [t for t in (_token_text(v) for v in (extra.values() if isinstance(extra, dict) else extra)) if t]
        ids = [backend.token_to_id(t) for t in [*self.special_tokens_map.values(), *extra_texts]]
        self.all_special_ids = list(dict.fromkeys(i for i in ids if i is not None))

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a client on another host renders prompts with it): the template as its text;
        a compiled jinja2 template does not pickle."""
        return {**self.__dict__, "_compiled": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.chat_template is not None:
            self._compiled = _environment().from_string(self.chat_template)

    def _id(self, name: str) -> Optional[int]:
        text = self.special_tokens_map.get(name)
        return None if text is None else self.backend_tokenizer.token_to_id(text)

    @property
    def eos_token_id(self) -> Optional[int]:
        return self._id("eos_token")

    @property
    def bos_token_id(self) -> Optional[int]:
        return self._id("bos_token")

    @property
    def pad_token_id(self) -> Optional[int]:
        return self._id("pad_token")

    def __len__(self) -> int:
        return int(self.backend_tokenizer.get_vocab_size(with_added_tokens=True))

    def __call__(self, text: Union[str, list[str]], add_special_tokens: bool = True) -> dict[str, Any]:
        if isinstance(text, str):
            return {"input_ids": self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids}
        encodings = self.backend_tokenizer.encode_batch(list(text), add_special_tokens=add_special_tokens)
        return {"input_ids": [e.ids for e in encodings]}

    def decode(self, ids: Union[int, Sequence[int]], skip_special_tokens: bool = False) -> str:
        ids = [ids] if isinstance(ids, int) else list(ids)
        return self.backend_tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[Optional[str]]:
        return [self.backend_tokenizer.id_to_token(i) for i in ids]

    def apply_chat_template(
        self, messages: list[dict[str, Any]], tokenize: bool = True, add_generation_prompt: bool = False, **kwargs: Any
    ) -> str:
        """The rendered text (``tokenize=False``, the only form the harness asks for)."""
        if tokenize:
            raise NotImplementedError("JsonTokenizer.apply_chat_template renders text: pass tokenize=False")
        if self._compiled is None:
            raise ValueError("the model's tokenizer has no chat template")
        return self._compiled.render(
            messages=messages, add_generation_prompt=add_generation_prompt, **{**self.special_tokens_map, **kwargs}
        )


def read_config(folder: Path) -> dict[str, Any]:
    """The folder's tokenizer_config.json, or {} where it has none that reads as an object."""
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def json_tokenizer(folder: Path, config: Optional[dict[str, Any]] = None) -> Optional[JsonTokenizer]:
    """The folder's tokenizer as a :class:`JsonTokenizer`, or None where it needs transformers
    (``config``: its tokenizer_config.json, when the caller has read it already)."""
    config = read_config(folder) if config is None else config
    if not config or config.get("clean_up_tokenization_spaces"):
        return None
    usable, template = _read_template(folder, config)
    if not usable:
        return None
    compiled = None
    if template is not None:
        from jinja2.exceptions import TemplateSyntaxError

        try:
            compiled = _environment().from_string(template)
        except TemplateSyntaxError:  # e.g. transformers' own {% generation %} tag
            return None
    from tokenizers import Tokenizer

    return JsonTokenizer(Tokenizer.from_file(str(folder / "tokenizer.json")), config, template, compiled)
