"""W4A8 quantization of a policy's linear layers with DuQuant's rotations and permutation.

numerics.py    4-bit weight / 8-bit activation codes, int4 packing, the int8 GEMM
transform.py   the block rotations and permutation every compute path shares
duquant.py     calibration: smoothing, greedy block rotations, zigzag permutation
layer.py       QuantLinear: buffers prepared once, compute paths chosen per tier
act.py         which ACT layers (attention split into q, k, v first)
apply.py       calibrate a module on observations and swap its layers
pi0_packs.py   import the per-layer .npz packs of the public pi0 DuQuant port
checkpoint.py  quantized ACT checkpoints (a variant of the act family's, policies.registry)
"""
