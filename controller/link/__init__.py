"""The control side of the inference process: the remote policy that spawns, supervises,
restarts and swaps it, its standbys, and the feed that sends it requests.

Torch-free. What both processes speak is controller.process_protocol; what every feed keeps is
controller.feed. controller.inference imports neither this package nor controller.daemon.
"""
