"""core/tokenizer.py: the fast path reads the same tokenizer AutoTokenizer does, without torch."""

import json
import subprocess
import sys

import pytest
from transformers import AutoTokenizer

from core.json_tokenizer import JsonTokenizer, json_tokenizer
from core.tokenizer import load_tokenizer, saved_class

TEXTS = ["Hello, world!", "  leading spaces and ünïcödé → 漢字", "<|im_start|>user\nhi<|im_end|>", ""]
CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "And 3+3?"},
]


@pytest.mark.parametrize("model", ["tiny_model", "real_model"])
def test_the_fast_path_gives_the_ids_and_text_autotokenizer_gives(model, request):
    folder = request.getfixturevalue(model).require_hf_dir()
    fast, auto = load_tokenizer(folder), AutoTokenizer.from_pretrained(folder)
    assert isinstance(fast, JsonTokenizer)
    for text in TEXTS:
        for special in (True, False):
            ids = auto(text, add_special_tokens=special)["input_ids"]
            assert fast(text, add_special_tokens=special)["input_ids"] == ids
    assert fast(TEXTS, add_special_tokens=False)["input_ids"] == auto(TEXTS, add_special_tokens=False)["input_ids"]
    for chat in (CHAT, CHAT[1:], CHAT[1:2]):  # with a system prompt, and the template's default one
        for generation_prompt in (True, False):
            assert fast.apply_chat_template(
                chat, add_generation_prompt=generation_prompt, tokenize=False
            ) == auto.apply_chat_template(chat, add_generation_prompt=generation_prompt, tokenize=False)
    assert fast.chat_template == auto.chat_template
    ids = auto(
        auto.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False) + "Ünïcödé → 漢字",
        add_special_tokens=False,
    )["input_ids"]
    for skip in (True, False):
        assert fast.decode(ids, skip_special_tokens=skip) == auto.decode(ids, skip_special_tokens=skip)
    assert fast.decode(ids[3]) == auto.decode(ids[3])
    assert fast.convert_ids_to_tokens(ids) == auto.convert_ids_to_tokens(ids)
    assert (fast.eos_token_id, fast.bos_token_id, fast.pad_token_id, len(fast), fast.all_special_ids) == (
        auto.eos_token_id,
        auto.bos_token_id,
        auto.pad_token_id,
        len(auto),
        auto.all_special_ids,
    )
    with pytest.raises(NotImplementedError, match="tokenize=False"):
        fast.apply_chat_template(CHAT)


def test_the_fast_path_imports_no_transformers(real_model):
    code = (
        "import sys; from core.tokenizer import load_tokenizer; "
        f"load_tokenizer({str(real_model.require_hf_dir())!r}); print('transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def copy_tokenizer(src, dst, **config_changes):
    for name in ("tokenizer.json", "special_tokens_map.json", "chat_template.jinja"):
        if (src / name).exists():
            (dst / name).write_bytes((src / name).read_bytes())
    config = json.loads((src / "tokenizer_config.json").read_text())
    (dst / "tokenizer_config.json").write_text(json.dumps({**config, **config_changes}))


@pytest.mark.parametrize("change", ["clean_up_tokenization_spaces", "generation_tag", "named_templates"])
def test_what_the_fast_path_cannot_answer_for_goes_through_transformers(tmp_path, real_model, change):
    folder = real_model.require_hf_dir()
    template = (folder / "chat_template.jinja").read_text()
    if change == "clean_up_tokenization_spaces":
        copy_tokenizer(folder, tmp_path, clean_up_tokenization_spaces=True)
    elif change == "generation_tag":
        copy_tokenizer(folder, tmp_path)
        tagged = "{% generation %}x{% endgeneration %}{{ '<|im_start|>assistant"
        (tmp_path / "chat_template.jinja").write_text(template.replace("{{ '<|im_start|>assistant", tagged))
    else:
        copy_tokenizer(folder, tmp_path, chat_template=[{"name": "default", "template": template}])
        (tmp_path / "chat_template.jinja").unlink()
    assert json_tokenizer(tmp_path) is None
    tok = load_tokenizer(tmp_path)
    assert type(tok).__name__ == "TokenizersBackend"
    assert tok("Hello")["input_ids"] == AutoTokenizer.from_pretrained(folder)("Hello")["input_ids"]


def test_a_folder_without_a_chat_template_has_none(tmp_path, real_model):
    copy_tokenizer(real_model.require_hf_dir(), tmp_path)
    (tmp_path / "chat_template.jinja").unlink()
    tok = load_tokenizer(tmp_path)
    assert isinstance(tok, JsonTokenizer) and tok.chat_template is None


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
