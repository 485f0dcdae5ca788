"""The feed: what every inference feed keeps (inference_feed), the requests a robot's session
hands it (pending_requests), the in-process feed (in_process_feed), the batch window and the
served-policy protocol. Nothing here crosses a process boundary; torch-free.
"""
