"""The driver side of the wire: the protocol codec, the client, keys and CurveZMQ for drivers.

Imports numpy, pyzmq and msgpack only, so a driver PC installs it without torch or pydantic.
"""
