"""An engine's server in a container: ``backend.container.image=…`` (null: the engine's
program on this machine).

    docker run --rm --name harness-<12 hex> --gpus all -p 127.0.0.1:{port}:<port inside>
        -v <model folder>:/model:ro [-v <run folder>/server-files:/harness:ro] [-e K=V …]
        <run_args> <image> <engine arguments>

The port is published on 127.0.0.1 only; inside the container the server listens on every
interface of the container's own network, or the published port could not reach it.

The ``docker run`` client is the managed process. A SIGTERM to it is passed on to the
container (docker's ``--sig-proxy``, on by default), so a normal stop is graceful; but a
client that dies — SIGKILLed after the grace period, or with the harness — leaves the
container running. So the preset's clean-up command is ``docker rm -f <name>``: it runs
once the client is gone (``ManagedServer.stop``), and from the watchdog when the harness is
SIGKILLed (``backends/server/backend.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from core.errors import ConfigError

MODEL_MOUNT = "/model"  # the model's folder, read-only
FILES_MOUNT = "/harness"  # the preset's files ({files}), read-only


@dataclass
class ContainerConfig:
    image: Optional[str] = None  # null: run the engine's program on this machine
    program: str = "docker"  # or podman (the same command line)
    gpus: Optional[str] = "all"  # docker run --gpus; null: no GPUs
    run_args: list[str] = field(default_factory=list)  # more `docker run` options, e.g. [--shm-size, 1g]

    def validate(self) -> None:
        if self.image is not None and not self.image.strip():
            raise ConfigError(
                "backend.container.image must be an image name, or null to run the engine on this machine"
            )
        if not self.program:
            raise ConfigError("backend.container.program must name the container tool (docker or podman)")


@dataclass(frozen=True)
class ContainerRun:
    """One container: the ``docker run`` argv, its name, and how to get rid of it."""

    program: str
    name: str
    argv: list[str]

    @property
    def cleanup(self) -> list[list[str]]:
        return [[self.program, "rm", "-f", self.name]]

    def exec(self, *args: str) -> list[str]:
        """A command run inside the running container."""
        return [self.program, "exec", self.name, *args]


def container_name() -> str:
    return f"harness-{uuid.uuid4().hex[:12]}"


def container_run(
    config: ContainerConfig,
    *,
    port: int,
    mounts: Mapping[str, str],
    args: Sequence[str],
    env: Optional[Mapping[str, str]] = None,
    name: Optional[str] = None,
) -> ContainerRun:
    """``docker run`` of ``config.image`` with ``args``, its ``port`` published as ``{port}``
    on 127.0.0.1; ``mounts``: host path (placeholders allowed) -> path inside, read-only."""
    if not config.image:
        raise ValueError("no container image configured")
    name = name or container_name()
    argv = [config.program, "run", "--rm", "--name", name]
    if config.gpus:
        argv += ["--gpus", config.gpus]
    argv += ["-p", f"127.0.0.1:{{port}}:{port}"]
    for source, target in mounts.items():
        argv += ["-v", f"{source}:{target}:ro"]
    for key, value in (env or {}).items():
        argv += ["-e", f"{key}={value}"]
    argv += [*config.run_args, config.image, *args]
    return ContainerRun(config.program, name, argv)


def mount_source(path: Path) -> str:
    """The folder to mount. Links that lead out of it (a Hugging Face cache snapshot's files
    point into its blobs folder) would be broken inside the container: ConfigError."""
    folder = path.resolve()
    for item in folder.iterdir():
        if item.is_symlink() and not item.resolve().is_relative_to(folder):
            raise ConfigError(
                f"the model folder {path} holds links that lead out of it ({item.name} -> {item.resolve()}), "
                "which a container cannot follow: pass model.path=<a folder of real files>"
            )
    return str(folder)
