"""The attention mechanisms the project started from: softmax, causal additive (Fastformer) and
its windowed form (both in ``additive``), linear (Katharopoulos), Heinsen's log-space attention
and future attention. Each has a registration module (``<name>``, free of torch: the entry
point), its mixer or model in ``<name>_model`` (torch), and, where both need them, its options
and checks in ``<name>_options`` (free of torch), so that imports run one way:
registration -> options <- model."""
