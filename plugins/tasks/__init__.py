"""Built-in tasks: synthetic recall and copying (``synthetic``), the MAD battery (``mad``),
occluded digits (``digits``), needle in a haystack (``needle``) and byte-level text recall
(``text_recall``). Each has a registration module (``<name>``, free of torch: the entry point),
its generators in ``<name>_data`` (torch), and, where both need them, its options, constants
and checks in ``<name>_options`` (free of torch), so that imports run one way:
registration -> options <- data."""
