"""The link between the control process and its inference process: the control side of that
process (spawning, supervision, the remote policy, the feeds that hand it observations) and what
both processes share (the channel, the messages, the observation slots).

Torch-free: the control process imports this package; controller.inference (where torch is)
imports it too, never the other way round.
"""
