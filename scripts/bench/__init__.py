"""Benchmarks of one piece of the daemon or of a policy step: the tick, guards, transport,
telemetry, the step path, starts, flow and pi0 steps; GPU timings (gpu_checks)."""
