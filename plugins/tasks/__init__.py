"""Built-in tasks: synthetic recall and copying (``synthetic``), the MAD battery (``mad``),
occluded digits (``digits``), needle in a haystack (``needle``) and byte-level text recall
(``text_recall``). Each is two modules: its registration (``<name>``, free of torch: the entry
point, with its options, constants and checks) and its generators in ``<name>_data`` (torch),
which the registration names by a "module:object" string, imported on first use; imports run
one way: data -> registration."""
