"""Tempo daemon, wire protocol and control loop. Driver-side modules import without torch."""
