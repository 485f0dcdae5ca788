"""The daemon: one ROUTER socket, messages to per-robot sessions, and the paced control loop.

Transport -> dispatch (handshake, observation checks) -> session; the loop ticks every robot.
"""
