"""What the machine did during a run: memory, GPUs, the engine's processes and metrics, the environment."""
