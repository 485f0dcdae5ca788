"""Policy checkpoints on disk: Tempo's own format and LeRobot ACT directories, read without pickle.
`policies.checkpoints.load` is the front door: detect a directory's format, load it, describe it."""
