"""Built-in plugins, each registered through the `attnbench` entry-point group exactly like a
third-party plugin (see pyproject.toml): ``attention`` (the mechanisms the project started
from), ``recurrent`` (modern recurrent and windowed mixers), ``tasks`` (synthetic and text
tasks) and ``kernels`` (kernels the mechanisms share)."""
