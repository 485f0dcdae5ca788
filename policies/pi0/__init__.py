"""The pi0 network (Physical Intelligence's flow-matching VLA) in plain torch, with the state_dict
keys of LeRobot's PI0Pytorch.

    config.py           Pi0Config and the tower widths (GemmaWidths, SiglipWidths); pydantic only
    siglip.py           the SigLIP vision tower and PaliGemma's multi-modal projector
    gemma.py            Gemma layer math: RMSNorm / adaRMS, rotary, attention, gated MLP
    joint_attention.py  one layer over the prefix and suffix streams, block-causal masks
    backbone.py         PaliGemmaWithExpert: prefix encoding (KV cache), the cached suffix pass,
                        the joint pass
    network.py          Pi0Network: embed_prefix, encode_prefix, velocity, sample_actions
    weights.py          expected_keys / expected_shapes, load_weights, apply_precision
    prompt.py           PromptEmbedder: token ids -> scaled embeddings, on the host

pi0.5 (policies.pi05) reuses all of it. This package's __init__ imports nothing, so importing
`policies.pi0.config` stays torch-free.
"""
