"""A flow-matching action-chunk policy, and real-time chunking (RTC) as a way to serve it.

    config.py   FlowConfig (the model, stored in its checkpoint) and the RTC modes/schedules;
                pydantic only, so the daemon's config can name them without torch
    layers.py   attention blocks and the time embedding
    model.py    FlowMatchingPolicy: encode once, integrate the action expert's velocity field
    guided_sampling.py  RTC's soft mask, guidance weights and guided sampler (exact,
                stop_grad, inpaint, trained) over any denoiser (flow here, pi0 in policies.pi0.rtc)
    rtc.py      RealTimeChunking: the guided sampler wrapping any flow policy
    codec.py    what the runner feeds the module: frames, state, noise, and for RTC the prefix
                and the inference delay

Random-weight flow policies for the demo and benchmarks are in `policies.demo`.

This package's __init__ imports nothing, so importing `policies.flow.config` stays torch-free.
"""
