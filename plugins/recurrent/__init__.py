"""Recurrent and windowed mixers researchers compare against today: retention, GLA, DeltaNet,
Gated DeltaNet, Mamba2 (SSD), sliding-window softmax and Based; one plugin module per
mechanism, with the shared chunked kernels beside them."""
