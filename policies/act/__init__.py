"""ACT (Action Chunking with Transformers): `config` (ACTConfig, pydantic only) and `model` (ACT).

This __init__ imports nothing, so that `policies.act.config` stays torch-free (the daemon's
control process reads configs that name it and must never load torch): import the model from
`policies.act.model`.
"""
