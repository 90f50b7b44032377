"""SGLang on a CPU-only machine: what can be checked here is its configuration.

SGLang cannot generate without its GPU kernels, so nothing here runs a model through it.
These tests check that the harness's config becomes SGLang's own ServerArgs (the installed
sglang package's class and schema), and that impossible values fail in one line. Its HTTP
dialect is checked in the server-mode tests, against a server that speaks it.
"""

import pytest
from engine_helpers import require_package

from backends.engines.sglang import SGLangConfig, build_server_args, server_args_schema, sglang_stats
from backends.registry import backend_registry
from core.environ import environment_kept
from core.errors import ConfigError


def server_args(**overrides):
    cfg = SGLangConfig(**overrides)
    cfg.validate()
    try:
        return build_server_args(cfg, "/models/smollm2")
    except ModuleNotFoundError:  # a check that needs SGLang's own ServerArgs
        require_package("sglang")
        raise


def test_three_configs_become_server_args():
    require_package("sglang")
    with environment_kept():  # as the harness imports it: SGLang's import sets cache variables
        from sglang.srt.server_args import ServerArgs

    default = server_args()
    assert isinstance(default, ServerArgs)
    assert (default.model_path, default.tp_size, default.disable_radix_cache) == ("/models/smollm2", 1, False)

    gpu = server_args(
        tp_size=2,
        mem_fraction_static=0.85,
        attention_backend="flashinfer",
        context_length=8192,
        chunked_prefill_size=4096,
        dtype="bfloat16",
    )
    assert (gpu.tp_size, gpu.mem_fraction_static, gpu.attention_backend) == (2, 0.85, "flashinfer")
    assert (gpu.context_length, gpu.chunked_prefill_size, gpu.dtype) == (8192, 4096, "bfloat16")

    no_radix = server_args(
        device="cpu",
        attention_backend="intel_amx",
        disable_radix_cache=True,
        server_args={"enable_metrics": True, "max_running_requests": 32},
    )
    assert (no_radix.device, no_radix.disable_radix_cache, no_radix.enable_metrics) == ("cpu", True, True)
    assert no_radix.max_running_requests == 32


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(attention_backend="nonsense"), "ServerArgs.attention_backend='nonsense' is not one of"),
        (dict(dtype="int3"), "ServerArgs.dtype='int3' is not one of"),
        (dict(server_args={"tp_sizee": 2}), "ServerArgs has no field 'tp_sizee'"),
        (dict(server_args={"enable_metrics": "yes"}), "ServerArgs.enable_metrics must be bool"),
        (dict(device="cpu", attention_backend="flashinfer"), "does not run on device=cpu"),
        (dict(mem_fraction_static=1.5), "backend.mem_fraction_static must be in (0, 1)"),
        (dict(tp_size=0), "backend.tp_size must be >= 1"),
        (dict(chunked_prefill_size=0), "backend.chunked_prefill_size must be > 0, or -1"),
    ],
)
def test_invalid_values_and_combinations_fail_in_one_line(overrides, message):
    with pytest.raises(ConfigError) as err:
        server_args(**overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_schema_comes_from_the_installed_sglang():
    require_package("sglang")
    with environment_kept():
        from sglang.srt.server_args import ServerArgs

    schema = server_args_schema(ServerArgs)
    assert schema["tp_size"][0] == (int,)
    assert "flashinfer" in schema["attention_backend"][1]


def test_meta_info_becomes_engine_stats():
    meta = {
        "prompt_tokens": 120,
        "completion_tokens": 16,
        "cached_tokens": 96,
        "e2e_latency": 0.5,
        "finish_reason": {"type": "length", "length": 16},
        "id": "abc",
    }
    stats = sglang_stats(meta)
    assert stats["cached_tokens"] == 96 and stats["prompt_tokens"] == 120
    assert stats["sglang_e2e_latency"] == 0.5 and "sglang_id" not in stats


def test_registered_with_its_config():
    entry = backend_registry.get("sglang")
    assert entry.config_cls is SGLangConfig and entry.cls.requires == ("sglang",)
