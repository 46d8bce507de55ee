"""Recurrent and windowed mixers researchers compare against today: retention, GLA, DeltaNet,
Gated DeltaNet, Mamba2 (SSD), sliding-window softmax and Based; one plugin module per
mechanism (its registration, free of torch) and its mixer in ``<name>_model``, with the shared
chunked kernels beside them."""
