"""The model folder's Hugging Face tokenizer, read without importing torch where the folder allows.

``AutoTokenizer`` imports transformers' model and generation machinery, and torch with it: about
8 s of a process's start on this machine, in every process that only needs a tokenizer (the
client of a server, llama.cpp, the reference server). A folder saved as a fast tokenizer (a
``tokenizer.json``, and ``tokenizer_config.json`` naming the generic fast class) is read by
:mod:`core.json_tokenizer` (the tokenizers library and jinja2, no transformers import at all), or
where that cannot answer for it, by transformers' generic fast class directly: the class
AutoTokenizer would pick, so the same token ids. Any other folder goes through AutoTokenizer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Union

from core.json_tokenizer import json_tokenizer, read_config

# the class names transformers saves for a plain fast tokenizer (v5: one class under two names)
GENERIC_FAST_CLASSES = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast"})


def saved_class(folder: Path) -> str:
    """The ``tokenizer_class`` a folder's tokenizer_config.json names, or "" when it names none."""
    return _class_named(read_config(folder))


def _class_named(config: dict[str, Any]) -> str:
    return str(config.get("tokenizer_class") or "")


def load_tokenizer(folder: Union[str, Path]) -> Any:
    """The tokenizer of a model folder: the generic fast class when the folder is one, else AutoTokenizer."""
    folder = Path(folder)
    config = read_config(folder)
    if (folder / "tokenizer.json").is_file() and _class_named(config) in GENERIC_FAST_CLASSES:
        light = json_tokenizer(folder, config)
        if light is not None:
            return light
        try:
            from transformers.tokenization_utils_tokenizers import TokenizersBackend
        except ImportError:  # transformers before v5 names the module differently
            pass
        else:
            return TokenizersBackend.from_pretrained(folder)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)
