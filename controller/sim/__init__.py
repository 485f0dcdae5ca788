"""A simulated robot (a complete driver) and `tempo demo`, which runs it against a daemon.

The sim robot needs numpy, pyzmq and msgpack only (wire, the pacer, a histogram): no torch.
"""
