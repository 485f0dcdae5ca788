"""Policies served by Tempo: the Policy protocol, models, checkpoints."""
