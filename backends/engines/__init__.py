"""One module per engine; each registers its backend in ``backends.registry`` by name."""
