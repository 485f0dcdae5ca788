"""Inference: the worker that runs the policy on each robot's newest observation, and the runner.

The runner serves a torch module from the highest tier of its ladder that passes its checks.
"""
