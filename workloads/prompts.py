"""Stage 1 of a request, intake: render the chat template and tokenize, once for every engine."""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from core.errors import ConfigError
from workloads.corpus import TokenizedCorpus

Messages = list[dict[str, str]]


def chat_messages(system: Optional[str], history: Messages) -> Messages:
    # None: no system message (the template may add its default); "" is an empty system message
    return ([{"role": "system", "content": system}] if system is not None else []) + history


class PromptRenderer:
    """Applies the model's own chat template (with the assistant prompt) and tokenizes."""

    def __init__(self, tokenizer: Any):
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError("the model's tokenizer has no chat template; use an instruct/chat model")
        self.tokenizer = tokenizer
        # the model's context length (config.json), when the engine session knows it: data
        # workloads refuse prompts longer than this before anything loads
        self.max_context: Optional[int] = None
        # One int object per token id, which every rendered prompt points at: the tokenizer
        # makes a new 28-byte int for each token of each prompt, and a plan keeps every prompt
        # for the whole run (a 32-token prompt: 0.9 KB of ids, 0.3 KB shared; 0.6 % of render).
        self._token_ints = list(range(_vocab_size(tokenizer)))

    def render(self, messages: Messages) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.shared_ints(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def shared_ints(self, ids: Sequence[int]) -> list[int]:
        """``ids`` as a list whose ints are the renderer's own (the same values)."""
        table = self._token_ints
        try:
            return [table[i] for i in ids]
        except (IndexError, TypeError):  # an id past the vocabulary size the tokenizer reports
            return list(ids)

    def wrap_ids(self, body_ids: list[int], make_messages: Callable[[str], Messages]) -> list[int]:
        """The rendered prompt around a message whose content is exactly ``body_ids`` (token-level
        prompts, e.g. a trace's hash blocks): the template's ids before and after the message."""
        marker = "\u2063MARKER\u2063"
        text = self.tokenizer.apply_chat_template(make_messages(marker), tokenize=False, add_generation_prompt=True)
        head, tail = text.split(marker, 1)
        encode = lambda t: self.tokenizer(t, add_special_tokens=False)["input_ids"] if t else []  # noqa: E731
        return self.shared_ints([*encode(head), *body_ids, *encode(tail)])

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Each text's ids, no special tokens added (a fast tokenizer does the batch in parallel)."""
        return [list(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]] if texts else []

    def overhead(self, make_messages: Callable[[str], Messages]) -> int:
        """Tokens the template adds around an empty message."""
        return len(self.render(make_messages("")))

    def fit_text(
        self,
        corpus: TokenizedCorpus,
        rng: np.random.Generator,
        target_len: int,
        make_messages: Callable[[str], Messages],
        overhead: Optional[int] = None,
    ) -> tuple[str, list[int]]:
        """Corpus text whose rendered prompt is exactly ``target_len`` tokens.

        Text is decoded and re-encoded inside the template, where tokens can merge across
        boundaries, so the window is grown or shrunk until the rendered length is exact.
        ``overhead``: :meth:`overhead` of ``make_messages``, when the caller knows it (a plan
        of many prompts: it is a third of the build otherwise).
        """
        if overhead is None:
            overhead = self.overhead(make_messages)
        if target_len <= overhead:
            raise ValueError(f"a prompt of {target_len} tokens cannot hold {overhead} tokens of template")
        for _attempt in range(8):
            start = corpus.random_start(rng)
            n = target_len - overhead
            for _step in range(12):
                text = corpus.text(start, n)
                ids = self.render(make_messages(text))
                diff = len(ids) - target_len
                if diff == 0:
                    return text, ids
                n = max(1, n - diff)
        raise RuntimeError(f"could not fit a prompt of exactly {target_len} tokens")


def _vocab_size(tokenizer: Any) -> int:
    try:
        return max(0, int(len(tokenizer)))
    except (TypeError, ValueError):
        return 0
