"""The pi0.5 network in plain torch, with the state_dict keys of LeRobot's PI05Pytorch. It is
pi0 (policies.pi0) with three changes: no state token (the state reaches the model as prompt
tokens), the time drives adaRMS in the expert's norms (time_mlp_in/out) instead of being fused
into the action tokens, and a longer prompt (200 tokens).

    config.py   Pi05Config; pydantic only
    network.py  Pi05Network

This package's __init__ imports nothing, so importing `policies.pi05.config` stays torch-free.
"""
