"""Tools for people: profile one policy step, compare two configs, benchmark the tiers.

They build the same runner and action pipeline the daemon serves with; nothing is copied.
"""
