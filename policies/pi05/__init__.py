"""The pi0.5 family's registration (family.py). Its network and config live with pi0's
(policies.pi0: pi05_config.py, pi05_network.py), since both share one served step and one
checkpoint reader; this folder depends on policies.pi0, never the other way.
"""
