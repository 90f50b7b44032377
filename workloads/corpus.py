"""Readable text for prompts: a small public-domain corpus shipped in workloads/corpus/.

Prompts are windows of real prose (see corpus/SOURCES.md), so what a model reads and what a
person reads in a report make sense, unlike random token ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

CORPUS_DIR = Path(__file__).parent / "corpus"


def corpus_text() -> str:
    files = sorted(CORPUS_DIR.glob("*.txt"))
    if not files:
        raise FileNotFoundError(f"no corpus text in {CORPUS_DIR}")
    return "\n\n".join(f.read_text(encoding="utf-8").strip() for f in files)


class TokenizedCorpus:
    """The corpus as token ids of one tokenizer, with windows that start at a word."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.ids: list[int] = tokenizer(corpus_text(), add_special_tokens=False)["input_ids"]
        tokens = tokenizer.convert_ids_to_tokens(self.ids)
        # Byte-level BPE marks a leading space with "Ġ"; SentencePiece with "▁".
        self.word_starts = np.array(
            [i for i, t in enumerate(tokens) if t[:1] in ("Ġ", "▁") and t[1:2].isupper()] or list(range(len(self.ids)))
        )

    def random_start(self, rng: np.random.Generator) -> int:
        # the draw rng.choice(self.word_starts) makes (the same bits, the same start), 4x faster
        return int(self.word_starts[rng.integers(0, len(self.word_starts))])

    def text(self, start: int, n_tokens: int) -> str:
        """Decode n_tokens from start, wrapping around the end of the corpus."""
        end = start + n_tokens
        if end <= len(self.ids):
            ids = self.ids[start:end]
        else:
            ids = [self.ids[(start + k) % len(self.ids)] for k in range(n_tokens)]
        return self.tokenizer.decode(ids).strip()
