"""What the control process and its inference process both speak: the typed messages, their
codec, the socket-pair channel, the shared-memory frame slots and the parent-death watch.

Torch-free; both sides import it. Not the driver protocol (controller.wire.protocol).
"""
