"""Built-in attention variants, each a plugin module registered through the `attnbench`
entry-point group exactly like a third-party plugin (see pyproject.toml)."""
