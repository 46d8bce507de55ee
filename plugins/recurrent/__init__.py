"""Recurrent and windowed mixers researchers compare against today: retention, GLA, DeltaNet,
Gated DeltaNet, Mamba2 (SSD), sliding-window softmax and Based. Each is two modules: its
registration (``<name>``, free of torch: the entry point, with its options) and its mixer in
``<name>_model`` (torch), which the registration names by a "module:object" string, imported on
first use; the chunked kernels two families share are beside them."""
