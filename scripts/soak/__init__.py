"""A real daemon under a simulated robot (soak), and what is measured through it: the timing
floor beside busy processes, isolation, recording and failover."""
