"""Recurrent and windowed mixers researchers compare against today: retention, GLA, DeltaNet,
Gated DeltaNet, Mamba2 (SSD), sliding-window softmax and Based; one plugin module per
mechanism (its registration, free of torch), its mixer in ``<name>_model`` and its options in
``<name>_options`` (free of torch; both import it), with the shared chunked kernels beside them."""
