"""The remote-code modules copied into every export folder (``auto_map`` points at them).
They import transformers, torch and the installed attnbench, and each other only
relatively, so they work both here and from transformers' module cache."""
