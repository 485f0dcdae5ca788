"""pi0 and pi0.5 (Physical Intelligence's flow-matching vision-language-action models) in plain
torch, with the state_dict keys of LeRobot's PI0Pytorch / PI05Pytorch, read from LeRobot and
openpi checkpoints and served as one module. The observation's way through:

    checkpoint_files.py  which layout a directory is; lerobot_files.py, openpi_files.py read
                         each (checkpoint_contents.py: what they return; norm_stats.py)
    policy.py            a read directory -> the served TensorPolicy (spec, step, codec)
    codec.py             a robot's context -> noise and the embedded prompt (prompt.py)
    step.py              Pi0Step: frames resized and padded, state normalized, the network,
                         actions unnormalized: the whole step as one module
    rtc.py               served with real-time chunking (the flow family's guided sampler over
                         the expert); rtc_codec.py: the previous plan and delay as inputs
    network.py           Pi0Network (pi05_network.py: Pi05Network): prefix once, Euler steps
    backbone.py          PaliGemmaWithExpert: prefix encoding (KV cache), the cached suffix pass
    joint_attention.py   one layer over the prefix and suffix streams, block-causal masks
    siglip.py, gemma.py  the vision tower and projector; Gemma's layer math
    config.py            Pi0Config and the widths (pi05_config.py: Pi05Config); pydantic only
    weights.py           expected keys and shapes, load_weights, apply_precision
    from_checkpoint.py   a read checkpoint -> its network config and network
    checkpoint_family.py the registry's checkpoint part; inspect.py; demo.py; family.py

policies/pi05/ registers pi0.5 (its family.py); it depends on this package, not the reverse.
This package's __init__ imports nothing, so importing `policies.pi0.config` stays torch-free.
"""
