"""`tempo profile`'s advice and table, from a `ProfileResult` (no torch, no measuring).

Each recommendation names the figure it rests on; the thresholds are below.
"""

from __future__ import annotations

import math

import numpy as np

from controller.observe.percentiles import summarize
from controller.runner_config import TIER_ORDER
from controller.tools.profile_result import ProfileResult

BIG_SHARE = 0.40  # one submodule above this share of the forward "dominates"
UPLOAD_SHARE = 0.20
PREPROCESS_SHARE = 0.20
RUNNER_REST_SHARE = 0.20
TICK_SHARE = 0.10  # ensembler + guards above this share of the control period
AUTOGRAD_SHARE = 0.25  # RTC exact's VJP above this share of the flow forward


# -- recommendations -------------------------------------------------------------------------------


def _pct(share: float | None) -> str:
    return "-" if share is None or math.isnan(share) else f"{share * 100:.0f}%"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None or math.isnan(seconds) else f"{seconds * 1e3:.2f} ms"


def _tier_advice(result: ProfileResult) -> list[str]:
    serving = result.tier.split(" ")[0]
    if serving not in ("eager_fp32", "eager_half"):
        return []
    reports = {t["name"]: t for t in result.tiers}
    reasons, untried = [], []
    for name in TIER_ORDER[: TIER_ORDER.index(serving)]:
        report = reports.get(name)
        if report is None:
            untried.append(name)
        elif report.get("state") == "skipped":
            reasons.append(f"{name} was refused at start: {report.get('reason')}")
        elif report.get("state") == "ready":
            reasons.append(f"{name} passed at start but was demoted (see tier history)")
    text = f"Serving from the eager tier {serving}, nothing compiled."
    if reasons:
        text += " " + "; ".join(reasons) + "."
    if untried:
        text += (
            f" Not tried: {', '.join(untried)} (runner.top_tier={result.top_tier_setting}"
            + (
                ", which on a CPU serves eager_fp32"
                if result.top_tier_setting == "auto" and not result.device.startswith("cuda")
                else ""
            )
            + "). To measure what compiling buys: tempo profile compare CONFIG --set "
            + (
                "runner.top_tier=compiled"
                if not result.device.startswith("cuda")
                else "runner.top_tier=graph"
            )
            + "."
        )
    elif reasons:
        text += (
            " Fix that error to get the compiled tiers (with runner.fullgraph: true a graph "
            "break names its source line in the log)."
        )
    return [text]


def _flow_advice(result: ProfileResult) -> list[str]:
    """Real-time chunking: what its exact mode costs, and the execution horizon the measured
    step time asks for."""
    if result.flow is None:
        return []
    out = []
    mode, chunk = result.flow["rtc_mode"], int(result.flow["chunk_size"])
    autograd = result.share("phase:autograd")
    row = result.row("phase:autograd")
    if autograd is not None and row is not None and autograd >= AUTOGRAD_SHARE:
        out.append(
            f"RTC exact's autograd correction (the VJP beyond a forward of the expert) is "
            f"{_ms(row.mean)}, {_pct(autograd)} of the eager forward. stop_grad skips it: "
            "`tempo profile compare CONFIG --rtc` says what each mode costs against RTC off on "
            "this machine, scripts/smoothness/rtc_smoothness.py what it buys in boundary "
            "smoothness."
        )
    step = result.row("step")
    if step is None or not step.samples.size:
        return out
    period = 1.0 / result.control_hz
    p99 = float(np.percentile(step.samples, 99))
    delay = math.ceil(p99 / period)
    horizon = result.query_period
    if mode == "off":
        if delay >= 1:
            out.append(
                f"A step takes up to {_ms(p99)} (p99), {delay} control step(s): with plain "
                f"chunk switching the robot jumps at every chunk boundary by what the policy "
                "changed its mind about. Real-time chunking (policy.rtc.mode, with "
                "execution.ensemble: newest) makes the new chunk agree with the executed prefix."
            )
        return out
    if horizon < delay:
        out.append(
            f"The inference delay is about {delay} control step(s) (p99 step {_ms(p99)}) but a "
            f"new chunk is asked every {horizon} (execution.query_period = the execution horizon "
            f"s): RTC needs s >= d. Set execution.query_period to at least {delay}."
        )
    elif chunk - horizon < delay:
        out.append(
            f"With H = {chunk} and s = {horizon}, the prefix the new chunk can agree with has "
            f"{chunk - horizon} actions, fewer than the delay d = {delay}: lower "
            f"execution.query_period to at most {chunk - delay}."
        )
    else:
        out.append(
            f"Execution horizon s = {horizon} fits the measured delay d = {delay} (p99 step "
            f"{_ms(p99)}) and H = {chunk}: any s in [{delay}, {chunk - delay}] works; a larger s "
            "asks the GPU less often, a smaller one reacts sooner."
        )
    return out


def recommend(result: ProfileResult) -> list[str]:
    """Advice derived from the numbers (each names the figure it rests on)."""
    out: list[str] = []
    step = result.row("step")
    children = [r for r in result.rows if r.key.startswith("sub:")]
    cuda = result.device.startswith("cuda")
    if children:
        top = max(children, key=lambda r: r.mean)
        share = result.share(top.key) or 0.0
        if share >= BIG_SHARE:
            looks_visual = any(
                w in top.label.lower() for w in ("backbone", "vision", "resnet", "cnn")
            )
            if looks_visual:
                name = "The backbone" + ("" if top.label == "backbone" else f" ({top.label})")
                advice = [f"{name} takes {_pct(share)} of the eager forward."]
                if result.n_cameras > 1:
                    # The module contract stacks the cameras of one frame shape, so a Tempo
                    # policy calls its backbone once per frame shape, never per camera.
                    advice.append(
                        f"Its {result.n_cameras} cameras already go through it one batch per "
                        "frame shape (cameras of one shape are stacked; `tempo checkpoint "
                        "inspect` says how many batches)."
                    )
                if cuda and not result.channels_last:
                    advice.append(
                        "Use channels_last (runner.channels_last: on; it is off now). On an H200 "
                        "a ResNet18 over 3 cameras went 2.44 ms (3 calls) -> 1.20 ms (one batch) "
                        "-> 0.87 ms (batch + channels_last)."
                    )
                elif cuda:
                    advice.append(
                        "It already runs channels_last; what is left is the input size (crop "
                        "or resize on the driver) or a lighter backbone."
                    )
                else:
                    advice.append(
                        "On a CPU channels_last rarely helps: a smaller input (resize on the "
                        "driver) or a GPU does."
                    )
                out.append(" ".join(advice))
            else:
                out.append(
                    f"{top.label} takes {_pct(share)} of the eager forward: optimize there first."
                )
    outside = result.share("outside")
    if outside is not None and outside > PREPROCESS_SHARE:
        text = (
            f"{_pct(outside)} of the eager forward runs outside submodules (input conversion, "
            "normalization, glue). Keep all preprocessing inside forward, constants as "
            "registered buffers, uint8 frames in, so it runs in the captured region"
        )
        if result.tier.split(" ")[0] in ("graph", "compiled"):
            text += f" (the {result.tier} tier fuses it already; the eager share overstates it)"
        else:
            text += "; a compiled or graph tier then fuses it into a few kernels"
        out.append(text + ".")
    upload = result.share("upload")
    if upload is not None and upload > UPLOAD_SHARE and result.row("upload") is not None:
        megabytes = result.frame_bytes / 1e6
        if cuda:
            out.append(
                f"Upload is {_pct(upload)} of the step ({megabytes:.2f} MB of frames per "
                "step). The staging is pinned and double-buffered already (0.215 ms pageable vs "
                "0.061 ms pinned for 2.76 MB on an H200); what is left scales with the bytes: "
                "send smaller frames (crop or resize on the driver) or fewer cameras."
            )
        else:
            out.append(
                f"Upload is {_pct(upload)} of the step ({megabytes:.2f} MB of frames copied per "
                "step on the CPU): smaller frames or fewer cameras are the lever here."
            )
    rest = result.share("rest")
    if rest is not None and rest > RUNNER_REST_SHARE:
        out.append(
            f"{_pct(rest)} of the step is outside upload, model and download (runner "
            "bookkeeping, Python overhead): at this step size the per-call overhead matters; a "
            "graph tier replays the whole step in one launch."
        )
    out += _tier_advice(result)
    out += _flow_advice(result)
    if step is not None and step.samples.size:
        p99 = float(np.percentile(step.samples, 99))
        budget = result.step_budget_ms
        if budget is not None and p99 * 1e3 > budget:
            out.append(
                f"The step's p99 ({_ms(p99)}) exceeds runner.step_budget_ms ({budget:g} ms): "
                "serving, the runner would count overruns and demote. Speed the step up or "
                "raise the budget."
            )
        period = 1.0 / result.control_hz
        median = float(np.median(step.samples))
        if median > period:
            lost = math.ceil(median / period)
            out.append(
                f"The step's median ({_ms(median)}) is longer than a control period "
                f"({_ms(period)} at {result.control_hz:g} Hz): every chunk arrives about "
                f"{lost} steps late and loses them; the robot plays older plans."
            )
    tick = (result.share("ensembler") or 0.0) + (result.share("guards") or 0.0)
    if tick > TICK_SHARE:
        out.append(
            f"Ensembler and guards take {_pct(tick)} of the control period per robot: the "
            "loop has little slack; lower the control rate or the chunk size."
        )
    if result.demotions:
        causes = ", ".join(
            f"{d['from_tier']} -> {d['to_tier']} ({d['cause']})" for d in result.demotions
        )
        out.append(f"The runner demoted during the profile: {causes}. The figures mix tiers.")
    if not out:
        out.append("Nothing stands out: no row is above the thresholds these hints use.")
    return out


# -- the table -------------------------------------------------------------------------------------


def render_profile(result: ProfileResult) -> str:
    lines = [
        f"policy   {result.policy}",
        f"device   {result.device}; serving tier {result.tier}"
        + (
            f", channels_last {'on' if result.channels_last else 'off'}"
            if result.channels_last is not None
            else ""
        ),
        f"run      {result.iterations} iterations after {result.warmup} warm-up; "
        f"observations {result.source}",
        f"control  {result.control_hz:g} Hz, query_period {result.query_period}",
        "",
    ]
    header = f"{'':<42}{'mean':>12}{'p50':>12}{'p99':>12}{'max':>12}{'share':>8}  measured"
    titles = {
        "step": "policy step, and its phases          (share of the step)",
        "model": "eager forward by top-level submodule  (share of the forward)",
        "tick": "per control step, per robot          (share of the period)",
        "phases": f"{'policy by phase':<38}(share of its eager forward)",
    }
    group = None
    for row in result.rows:
        if row.group != group:
            group = row.group
            if group != "step":
                lines.append("")
            lines.append(titles[group])
            if group == "step":
                lines.append(header)
        s = summarize(row.samples)
        indent = "" if row.key in ("step", "forward", "phase:total") else "  "
        if row.derived:
            cells = f"{_ms(s.mean):>12}{'':>12}{'':>12}{'':>12}"
        else:
            cells = f"{_ms(s.mean):>12}{_ms(s.p50):>12}{_ms(s.p99):>12}{_ms(s.max):>12}"
        lines.append(
            f"{indent + row.label:<42}{cells}{_pct(result.share(row.key)):>8}  {row.measured}"
        )
    if result.row("outside") is None and result.row("forward") is not None:
        lines.append("  (the module has no submodules to break down)")
    if result.uncalled_children:
        lines.append(
            "  (not called as modules, their work is in 'outside submodules': "
            + ", ".join(result.uncalled_children)
            + ")"
        )
    if result.row("forward") is not None and result.tier.split(" ")[0] in ("graph", "compiled"):
        lines.append(
            "  (the breakdown times the eager module; the serving tier fuses kernels across "
            "these boundaries, so read shares, not absolute times)"
        )
    lines.append("")
    lines.append("recommendations")
    lines += [f"  - {text}" for text in result.recommendations]
    if result.torch_trace:
        lines.append("")
        lines.append(
            f"torch.profiler trace: {result.torch_trace} (open in ui.perfetto.dev, or "
            "`tensorboard --logdir` on its folder with torch-tb-profiler); top ops in "
            "summary.txt beside it"
        )
    return "\n".join(lines)
