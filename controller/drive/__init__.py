"""`tempo drive`: a LeRobot `Robot` (and optionally a leader arm, a `Teleoperator`) driven by the
daemon through the public client.

The feature mapping (feature_map) and the paced loop (drive_loop) need numpy and the client
only; LeRobot itself is imported by lerobot_devices alone, when a robot is built. No torch here.
"""
