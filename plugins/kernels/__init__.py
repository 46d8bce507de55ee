"""Kernels the built-in mechanisms share, with no registration of their own: causal additive
pooling (``additive``, settings in ``additive_spec``), log-sum-exp merging of attention blocks
(``lse_merge``), flash-linear-attention's linear attention (``fla_linear``) and a causal
depthwise convolution (``short_conv``)."""
