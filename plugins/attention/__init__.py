"""The attention mechanisms the project started from: softmax, causal additive (Fastformer) and
its windowed form (both in ``additive``), linear (Katharopoulos), Heinsen's log-space attention
and future attention. Each is two modules: its registration (``<name>``, free of torch: the entry
point, with its options and analytic sizes) and its mixer or model in ``<name>_model`` (torch),
which the registration names by a "module:object" string, imported on first use; imports run
one way: model -> registration."""
