import pytest

from workloads.corpus import TokenizedCorpus
from workloads.prompts import PromptRenderer


@pytest.fixture(scope="module")
def parts(real_tokenizer):
    """A renderer and corpus of the store model's tokenizer (tiny-random has the same one)."""
    return PromptRenderer(real_tokenizer), TokenizedCorpus(real_tokenizer)
