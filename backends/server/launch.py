"""What launches a server: its interpreter (``backend.python``), its command with the
placeholders filled in, and a free port on 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Optional

from backends.base import BackendConfig
from backends.preset import ServerPreset
from core.errors import ConfigError
from core.model import ModelFiles

HOST = "127.0.0.1"

PLACEHOLDERS = ("model", "gguf", "port", "host", "python", "files", "aux_port")


def resolve_python(value: Optional[str]) -> str:
    """The interpreter that runs the server: ``backend.python`` (a file, a name on PATH, or a
    virtual-environment folder), else the harness's own. Symlinks are kept: a venv's
    ``bin/python`` is a link whose location selects the venv."""
    if value is None:
        return sys.executable
    path = Path(value).expanduser()
    if path.is_dir():
        for candidate in (path / "bin" / "python", path / "bin" / "python3", path / "Scripts" / "python.exe"):
            if candidate.is_file():
                return str(candidate.absolute())
        raise ConfigError(f"backend.python {value} is a folder without bin/python (not a virtual environment)")
    if path.is_file() and os.access(path, os.X_OK):
        return str(path.absolute())
    found = shutil.which(value)
    if found:
        return found
    raise ConfigError(f"backend.python {value} does not exist (give an interpreter or a virtual-environment folder)")


def check_server_config(config: BackendConfig) -> None:
    """Before any model loads: the interpreter (and a custom command's program) exist."""
    resolve_python(config.python)
    if config.server_command:
        program = config.server_command[0]
        if "{" not in program and shutil.which(program) is None and not Path(program).is_file():
            raise ConfigError(f"backend.server_command: {program} not found")


def fill_placeholders(args: list[str], values: dict[str, Callable[[], str]]) -> list[str]:
    """Replace ``{name}`` in each argument; a value is computed only when some argument uses it
    (``{gguf}`` of a model without one raises). Other braces (JSON arguments) are left alone."""
    out = []
    for arg in args:
        for name, get in values.items():
            token = "{" + name + "}"
            if token in arg:
                arg = arg.replace(token, get())
        out.append(arg)
    return out


def placeholder_values(
    config: BackendConfig, model: ModelFiles, port: int, host: str = HOST, files_dir: Optional[Path] = None
) -> dict[str, Callable[[], str]]:
    """The values of PLACEHOLDERS for one launch (``{aux_port}`` is picked once, when first used)."""
    python = resolve_python(config.python)
    aux: list[str] = []

    def aux_port() -> str:
        if not aux:
            aux.append(str(free_port(host)))
        return aux[0]

    def files() -> str:
        if files_dir is None:
            raise ConfigError("{files} is used, but the preset writes no files")
        return str(files_dir)

    return {
        "model": lambda: str(model.require_hf_dir()),
        "gguf": lambda: str(model.require_gguf()),
        "port": lambda: str(port),
        "host": lambda: host,
        "python": lambda: python,
        "files": files,
        "aux_port": aux_port,
    }


def server_argv(
    config: BackendConfig,
    preset: ServerPreset,
    model: ModelFiles,
    port: int,
    host: str = HOST,
    files_dir: Optional[Path] = None,
    values: Optional[dict[str, Callable[[], str]]] = None,
) -> list[str]:
    values = values or placeholder_values(config, model, port, host, files_dir)
    if config.server_command:
        argv = list(config.server_command)
    elif preset.uses_python:
        argv = [values["python"](), *preset.command]
    else:
        argv = list(preset.command)
    argv += config.server_flags()
    return fill_placeholders(argv, values)


def port_free(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: TIME_WAIT is no clash
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def choose_port(requested: int, host: str = HOST) -> tuple[int, Optional[str]]:
    """(port, note): ``requested``, or a free one when it is 0 or in use (the note says so)."""
    if requested == 0:
        return free_port(host), None
    if port_free(requested, host):
        return requested, None
    port = free_port(host)
    return port, f"port {requested} is in use; using port {port} instead"
