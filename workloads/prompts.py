"""Stage 1 of a request, intake: render the chat template and tokenize, once for every engine."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

import numpy as np

from core.errors import ConfigError
from workloads.corpus import TokenizedCorpus

Messages = list[dict[str, str]]


def chat_messages(system: Optional[str], history: Messages) -> Messages:
    # None: no system message (the template may add its default); "" is an empty system message
    return ([{"role": "system", "content": system}] if system is not None else []) + history


def user_only(text: str) -> Messages:
    """One user message, no system message: a single-turn prompt."""
    return chat_messages(None, [{"role": "user", "content": text}])


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
        return self.shared_ints(self.tokenizer(self._template(messages), add_special_tokens=False)["input_ids"])

    def render_batch(self, conversations: list[Messages]) -> list[list[int]]:
        """:meth:`render` of each, the texts tokenized in one batch (a fast tokenizer encodes a
        batch on every core, and once through its Python wrapper)."""
        return [self.shared_ints(ids) for ids in self.encode_batch([self._template(m) for m in conversations])]

    def _template(self, messages: Messages) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

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
        head, tail = self._template(make_messages(marker)).split(marker, 1)

        def encode(t: str) -> list[int]:
            return self.tokenizer(t, add_special_tokens=False)["input_ids"] if t else []

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
        boundaries, so the window is grown or shrunk until the rendered length is exact; a
        window that cannot fit gives way to another (a new draw from ``rng``), up to 8.
        ``overhead``: :meth:`overhead` of ``make_messages``, when the caller knows it (a plan
        of many prompts: it is a third of the build otherwise).
        """
        return self.fit_texts(corpus, rng, [target_len], make_messages, overhead)[0]

    def fit_texts(
        self,
        corpus: TokenizedCorpus,
        rng: np.random.Generator,
        target_lens: Sequence[int],
        make_messages: Callable[[str], Messages],
        overhead: Optional[int] = None,
    ) -> list[tuple[str, list[int]]]:
        """:meth:`fit_text` of each length in turn: the same texts and ids, and the same draws
        from ``rng``, as calls one by one (a plan's sha256 does not depend on which ran), with the
        windows of up to 32 prompts encoded in one batch.

        The draws are one stream: prompt p takes the next draw, and another after each window
        that cannot fit. A batch fits the next draws to the next prompts as if every window
        fits; after one that does not, the draws that follow belong one prompt earlier, and
        the next batch fits them again (from a cache where the length is the same)."""
        if overhead is None:
            overhead = self.overhead(make_messages)
        for target_len in target_lens:
            _check_room(target_len, overhead)
        state = rng.bit_generator.state
        draws: list[int] = []
        tried: dict[tuple[int, int], Optional[tuple[str, list[int]]]] = {}  # (draw, length) → fit
        fitted: list[tuple[str, list[int]]] = []
        used = windows = 0  # draws taken; windows of the current prompt that did not fit
        while len(fitted) < len(target_lens):
            p = len(fitted)
            pairs = [(used + i, target_lens[p + i]) for i in range(min(BATCH, len(target_lens) - p))]
            todo = [pair for pair in pairs if pair not in tried]
            while len(draws) < used + len(pairs):
                draws.append(corpus.random_start(rng))
            starts, lens = [draws[d] for d, _ in todo], [n for _, n in todo]
            found = self._fit_windows(corpus, starts, lens, make_messages, overhead)
            tried.update(zip(todo, found))
            for pair in pairs:
                fit = tried[pair]
                used += 1
                if fit is None:
                    windows += 1
                    if windows == WINDOWS:
                        raise RuntimeError(f"could not fit a prompt of exactly {pair[1]} tokens")
                    break
                fitted.append(fit)
                windows = 0
            tried = {pair: fit for pair, fit in tried.items() if pair[0] >= used}
        # the generator as the draws taken leave it, not the ones made ahead
        rng.bit_generator.state = state
        for _ in range(used):
            corpus.random_start(rng)
        return fitted

    def _fit_windows(
        self,
        corpus: TokenizedCorpus,
        starts: list[int],
        target_lens: list[int],
        make_messages: Callable[[str], Messages],
        overhead: int,
    ) -> list[Optional[tuple[str, list[int]]]]:
        """Each window of ``starts`` grown or shrunk to its target length (up to 12 tries, in
        lockstep, one batch encode a try), or None where it cannot: where the next length to try
        is one tried already, the tries cycle and never fit (the same answer as the 12 tries)."""
        n = [target_len - overhead for target_len in target_lens]
        tried: list[set[int]] = [set() for _ in starts]
        fitted: list[Optional[tuple[str, list[int]]]] = [None] * len(starts)
        pending = list(range(len(starts)))
        for _step in range(STEPS):
            if not pending:
                break
            texts = {i: corpus.text(starts[i], n[i]) for i in pending}
            rendered = self.render_batch([make_messages(texts[i]) for i in pending])
            still = []
            for i, ids in zip(pending, rendered):
                diff = len(ids) - target_lens[i]
                if diff == 0:
                    fitted[i] = (texts[i], ids)
                    continue
                tried[i].add(n[i])
                n[i] = max(1, n[i] - diff)
                if n[i] not in tried[i]:
                    still.append(i)
            pending = still
        return fitted


# fit_text's search: windows per prompt, and tries per window; fit_texts' prompts per batch (a
# window that cannot fit, about 2 % of them, costs the rest of its batch a second fit)
WINDOWS, STEPS, BATCH = 8, 12, 32


def _check_room(target_len: int, overhead: int) -> None:
    if target_len <= overhead:
        raise ValueError(f"a prompt of {target_len} tokens cannot hold {overhead} tokens of template")


def _vocab_size(tokenizer: Any) -> int:
    try:
        return max(0, int(len(tokenizer)))
    except (TypeError, ValueError):
        return 0
