"""What backends/, workloads/ and harness/ share: errors, registries, model files and the
types that cross the Backend interface. Nothing here imports harness/, backends/ or workloads/."""
