"""Kernels and CPU fast paths under the maths: the streamed attention, the fused Triton kernel, dropout masks
drawn from a seed, and few-row products split across CPU threads. Each computes what the plain PyTorch expression
it replaces computes; tests hold them to it."""
