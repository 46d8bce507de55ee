"""Modern recurrent mixers (issue 29): retention, GLA, DeltaNet, Gated DeltaNet and their
kin, one plugin module per mechanism, with the shared chunked kernels beside them."""
