"""Corpora shipped inside the package (``source: builtin``): offline everywhere, the
same bytes on every machine, checked by sha256 when read. See corpora/README.md."""

from __future__ import annotations

import functools
import hashlib
import lzma
from importlib import resources

from attnbench.errors import DataError

# name -> (file under data/corpora, sha256 of the decompressed UTF-8 text)
BUILTIN_CORPORA: dict[str, tuple[str, str]] = {
    "tinyshakespeare": ("tinyshakespeare.txt.xz", "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"),
}
DEFAULT_BUILTIN = "tinyshakespeare"


@functools.lru_cache(maxsize=4)
def builtin_text(name: str) -> str:
    """The decompressed text of a shipped corpus."""
    if name not in BUILTIN_CORPORA:
        raise DataError(f"no built-in corpus named {name!r}; built-in corpora: {sorted(BUILTIN_CORPORA)}")
    file, sha256 = BUILTIN_CORPORA[name]
    raw = lzma.decompress(resources.files("attnbench.data").joinpath("corpora", file).read_bytes())
    if hashlib.sha256(raw).hexdigest() != sha256:
        raise DataError(f"built-in corpus {name!r} ({file}) does not match its recorded sha256; reinstall attnbench")
    return raw.decode("utf-8")
