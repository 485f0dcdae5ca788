"""Seeing the daemon work: timing histograms, status snapshots, the status socket, /metrics.

Every duration is recorded once, in telemetry; status, the demo and the benchmarks read it.
"""
