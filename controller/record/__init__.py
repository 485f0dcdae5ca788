"""The flight recorder: every robot's observations, inference requests, chunks and commands,
queued on the tick path and written to MCAP by a thread of its own (torch-free)."""
