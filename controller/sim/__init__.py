"""A simulated robot (a complete driver) and `tempo demo`, which runs it against a daemon.

The sim robot imports only the wire package, so it runs on a driver PC without torch.
"""
