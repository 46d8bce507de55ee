"""Modern recurrent and windowed mixers (issue 29), one plugin module per mechanism, with
the chunked kernels they share beside them."""
