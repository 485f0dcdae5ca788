"""Names of the telemetry's built-in sections and what each measures. Plain constants, no
pydantic, so `tempo status` renders a daemon's answer on a driver's install."""

from __future__ import annotations

# -- built-in sections: the whole path of one observation, in that order --------------------------

RECEIVE = "receive"
PREPROCESS = "preprocess"
MAILBOX_WAIT = "mailbox_wait"
INFERENCE = "inference"
PROCESS_STEP = "process_step"
UPLOAD = "upload"
MODEL = "model"
MODEL_GPU = "model_gpu"
POSTPROCESS = "postprocess"
ENSEMBLER = "ensembler"
GUARDS = "guards"
SEND = "send"
TICK = "tick"
TICK_LATENESS = "tick_lateness"
OBS_TO_ACTION = "obs_to_action"
GC_PAUSE = "gc_pause"

BUILTIN_SECTIONS: dict[str, str] = {
    RECEIVE: "receive and decode one driver message (Dispatcher.handle), loop thread",
    PREPROCESS: "check an observation's arrays (names, shapes, finite values), loop thread",
    MAILBOX_WAIT: "observation received -> the inference feed starts on it",
    INFERENCE: "one policy call by the inference feed (upload + model + postprocess)",
    PROCESS_STEP: "one step inside the inference process: request taken -> chunk in its host "
    "memory (inference minus this: the trips between the processes)",
    UPLOAD: "staging upload: host copy into (pinned) staging and enqueue the copy, host time",
    MODEL: "serving tier's run (graph replay, compiled or eager call), host time",
    MODEL_GPU: "serving tier's run on the compute stream, CUDA events",
    POSTPROCESS: "download the chunk into a host array (waits for the GPU to finish)",
    ENSEMBLER: "merge new chunks and read this step's action, loop thread",
    GUARDS: "teleop blend and guard chain (ActionPipeline.check), per robot",
    SEND: "encode and send one action",
    TICK: "one whole control tick, all robots",
    TICK_LATENESS: "how late a tick started after its deadline",
    GC_PAUSE: "one garbage collection in the daemon's process, on any thread (all wait for it)",
    OBS_TO_ACTION: "observation received -> first action sent from its chunk",
}
"""Section name -> what it measures (table and /metrics help text)."""
