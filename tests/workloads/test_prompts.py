"""Fitting corpus windows to exact prompt lengths: the batched search gives what the one-at-a-time
search gives, so a plan (and its sha256) does not change with the speed of its builder."""

import numpy as np
import pytest

from workloads.prompts import user_only


def one_at_a_time(renderer, corpus, rng, target_len, overhead):
    """The search as first written: up to 8 windows, each grown or shrunk up to 12 times."""
    for _window in range(8):
        start, n = corpus.random_start(rng), target_len - overhead
        for _try in range(12):
            text = corpus.text(start, n)
            ids = renderer.render(user_only(text))
            if len(ids) == target_len:
                return text, ids
            n = max(1, n - (len(ids) - target_len))
    raise RuntimeError("no fit")


def test_batched_fits_are_the_one_at_a_time_fits_with_the_same_draws(parts, monkeypatch):
    renderer, corpus = parts
    overhead = renderer.overhead(user_only)
    lengths = [int(n) for n in np.random.default_rng(5).integers(overhead + 1, 160, size=150)]
    windows = []  # every window the batched search fitted: None where it could not
    fit_windows = renderer._fit_windows

    def recording(*args):
        found = fit_windows(*args)
        windows.extend(found)
        return found

    monkeypatch.setattr(renderer, "_fit_windows", recording)

    batched_rng, reference_rng = np.random.default_rng(11), np.random.default_rng(11)
    batched = renderer.fit_texts(corpus, batched_rng, lengths, user_only, overhead=overhead)
    reference = [one_at_a_time(renderer, corpus, reference_rng, n, overhead) for n in lengths]
    assert batched == reference
    assert [len(ids) for _, ids in batched] == lengths
    # the generator is left where the one-at-a-time search leaves it (the next draws agree)
    assert batched_rng.bit_generator.state == reference_rng.bit_generator.state
    assert None in windows  # a window that could not fit, and the prompts after it refitted


def test_one_prompt_too_short_for_the_template_is_refused(parts):
    renderer, corpus = parts
    overhead = renderer.overhead(user_only)
    with pytest.raises(ValueError, match=f"cannot hold {overhead} tokens of template"):
        renderer.fit_texts(corpus, np.random.default_rng(0), [overhead + 5, overhead], user_only)
