"""Weight-only quantization measured: ACT (bench_quant) and pi0 (bench_quant_pi0, with its
per-GEMM-shape half in quant_pi0_shapes)."""
