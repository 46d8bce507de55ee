"""The remote-code modules copied into every export folder (``auto_map`` points at them).
They import only transformers, torch and attnbench's public API, never each other's
absolute names, so they work both here and from transformers' module cache."""
