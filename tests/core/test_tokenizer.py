"""core/tokenizer.py: the fast path reads the same tokenizer AutoTokenizer does, without torch."""
import json
import subprocess
import sys

import pytest
from transformers import AutoTokenizer

from core.tokenizer import load_tokenizer, saved_class

TEXTS = ["Hello, world!", "  leading spaces and ünïcödé → 漢字", "<|im_start|>user\nhi<|im_end|>", ""]
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}]


@pytest.mark.parametrize("model", ["tiny_model", "real_model"])
def test_the_fast_path_gives_the_ids_autotokenizer_gives(model, request):
    folder = request.getfixturevalue(model).require_hf_dir()
    fast, auto = load_tokenizer(folder), AutoTokenizer.from_pretrained(folder)
    assert type(fast) is type(auto)
    for text in TEXTS:
        for special in (True, False):
            ids = auto(text, add_special_tokens=special)["input_ids"]
            assert fast(text, add_special_tokens=special)["input_ids"] == ids
    assert fast.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False) == \
        auto.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    ids = auto("Hello there, friend")["input_ids"]
    assert fast.decode(ids) == auto.decode(ids)
    assert (fast.eos_token_id, fast.bos_token_id, fast.pad_token_id, len(fast)) == \
        (auto.eos_token_id, auto.bos_token_id, auto.pad_token_id, len(auto))


def test_the_fast_path_imports_no_torch(real_model):
    code = ("import sys; from core.tokenizer import load_tokenizer; "
            f"load_tokenizer({str(real_model.require_hf_dir())!r}); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_folder_naming_another_class_goes_through_autotokenizer(tmp_path, real_model):
    folder = real_model.require_hf_dir()
    for name in ("tokenizer.json", "special_tokens_map.json", "chat_template.jinja"):
        if (folder / name).exists():
            (tmp_path / name).write_bytes((folder / name).read_bytes())
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "GPT2Tokenizer"}))
    assert saved_class(tmp_path) == "GPT2Tokenizer"
    expected = AutoTokenizer.from_pretrained(tmp_path)("Hello")["input_ids"]
    assert load_tokenizer(tmp_path)("Hello")["input_ids"] == expected


def test_a_folder_without_a_readable_config_names_no_class(tmp_path):
    assert saved_class(tmp_path) == ""
    (tmp_path / "tokenizer_config.json").write_text("[not a dict")
    assert saved_class(tmp_path) == ""
