"""Policy checkpoints on disk: Tempo's own format, read without pickle, for every family in
policies.registry (each family's folder holds its own part: policies/act/checkpoint.py, ...; the
readers of other formats too: LeRobot ACT in policies/act/lerobot.py).
`policies.checkpoints.load` is the front door: detect a directory's format, load it, describe it."""
