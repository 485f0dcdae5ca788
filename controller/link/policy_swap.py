"""Swapping the served policy for a new checkpoint while serving (`tempo swap`).

    name = resolve_policy_name(None, ("arm", "wrist"))     # "arm"; unknown names refused
    config = config_with_path(config_json, "/ckpt/new")   # the serving config, new policy.path
    check_compatible(old_spec, new_spec)                  # PolicyError, one sentence, if not
    swapper = Swapper(remote_policy)                        # RemotePolicy's (SwappablePolicy)
    swapper.start("/ckpt/new", now=True, name="arm")        # refused at once, or under way
    swapper.cancel()                                        # `tempo swap --cancel`
    swapper.status()                                        # the last swap, for status

RemotePolicy.swap builds the new policy in a new inference process (a hot standby of the same
config with policy.path replaced, `standbys.HotBuild`), which runs the same start-up parity
checks; checks that robots bound to the old policy can be served by it (`check_compatible`);
and only then switches: every robot at once (`now`: the serving channel goes to it), or each
robot at its next episode start (`episode_swap`: both processes serve until no robot is left on
the old one; the phase is "switching" meanwhile, with how many robots have moved). A swap that
fails any of this leaves the serving process, its config and its standby as they were, and says
why (`SwapState.detail`); so does one whose new process fails while robots move (those on it
return to the old one), and one whose old process fails then is done (every robot moves). A
swap at episode starts never holds the next one: a later swap replaces it, `cancel` ends it,
and it times out (Swapper's doc).

This module imports no torch (it runs in the control process).
"""

from __future__ import annotations

import itertools
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from controller.errors import PolicyError
from controller.feed.served_policy import ServedPolicy
from controller.link.incoming import Incoming
from controller.link.process_spawner import Child, Spawner
from controller.link.standbys import HotBuild
from controller.link.swap_checks import check_compatible
from controller.observe.log_safety import TEXT_CHARS, shown
from controller.process_protocol.process_messages import Hello
from policies.base import PolicySpec

log = logging.getLogger(__name__)


SwapPhase = Literal["building", "switching", "done", "failed", "cancelled", "replaced", "timed_out"]
EPISODE_SWAP_TIMEOUT_S = 300.0  # supervision.episode_swap_timeout_s's default


def resolve_policy_name(name: str | None, names: tuple[str, ...]) -> str:
    """Which of the served policies `names` (the default first) `name` refers to (None: the
    default); PolicyError if none is called that."""
    if name is None:
        return names[0]
    if name not in names:
        listed = ", ".join(repr(n) for n in names)
        raise PolicyError(f"no policy named {name!r} is served here (served: {listed})")
    return name


def config_with_path(config_json: str, path: str) -> str:
    """The daemon's config (JSON) with policy.path replaced (a checkpoint from now on)."""
    config = json.loads(config_json)
    config["policy"]["kind"] = "checkpoint"
    config["policy"]["path"] = path
    return json.dumps(config)


class SwappablePolicy(Protocol):
    """What a Swapper uses of its policy (RemotePolicy; its docs say what each does)."""

    start_timeout_s: float

    @property
    def serving(self) -> bool: ...

    @property
    def stopping(self) -> bool: ...

    @property
    def config_json(self) -> str | None: ...

    @property
    def spec(self) -> PolicySpec: ...

    @property
    def switch_lock(self) -> threading.Lock: ...

    def spawner_for(self, config_json: str) -> Spawner: ...

    def switch_to(
        self, child: Child, hello: Hello, spawner: Spawner, config_json: str
    ) -> float: ...

    def begin_incoming(
        self, child: Child, hello: Hello, spawner: Spawner, config_json: str
    ) -> Incoming: ...

    def finish_incoming(self, incoming: Incoming) -> bool: ...

    def abandon_incoming(self, incoming: Incoming, why: str) -> bool: ...


@dataclass
class SwapState:
    """One swap, as `tempo status` (and `tempo swap`, which polls it) shows it."""

    id: int
    path: str
    policy: str
    now: bool
    phase: SwapPhase = "building"
    detail: str = "building the new policy in a new inference process"
    pid: int | None = None  # the new process's
    started: float = field(default_factory=time.time)
    switched: float | None = None  # when the new process began to serve (wall clock)
    robots_moved: int | None = None  # switching at episode starts: robots on the new policy
    robots_on_old: int | None = None  # and those still on the old one (None: not counted yet)
    finished: float | None = None

    def finish(self, phase: SwapPhase, detail: str) -> None:
        # The detail may quote the path a client sent: escaped, as it reaches logs and status.
        self.phase, self.detail, self.finished = phase, shown(detail, TEXT_CHARS), time.time()

    @property
    def under_way(self) -> bool:
        return self.phase in ("building", "switching")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class SwapEnded(PolicyError):
    """A swap under way was ended before it was done: cancelled, replaced or timed out (its
    phase), as `detail` says; the old policy serves every robot."""

    def __init__(self, phase: SwapPhase, detail: str) -> None:
        super().__init__(detail)
        self.phase = phase


class Swapper:
    """A RemotePolicy's swaps: one at a time, each built and checked on the swap thread, then
    switched under the policy's `switch_lock` (never beside a restart).

    A swap switching at episode starts waits on robots, which may never start an episode: a
    later swap replaces it (`start`), `cancel` ends it, and it times out after
    `episode_timeout_s` (supervision.episode_swap_timeout_s); each time its new process ends
    and the old policy serves every robot again. A swap being built is refused a replacement
    (it ends on its own, within supervision.start_timeout_s) but can be cancelled.

    The swap thread lives until `close`, not one swap: an inference process asks the kernel to
    kill it when the thread that spawned it ends (PR_SET_PDEATHSIG follows the thread, not the
    process), and a swapped-in process (and the standby its switch starts) serves on."""

    def __init__(
        self, policy: SwappablePolicy, episode_timeout_s: float = EPISODE_SWAP_TIMEOUT_S
    ) -> None:
        self._policy = policy
        self._episode_timeout_s = episode_timeout_s
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._current: SwapState | None = None
        self._build: HotBuild | None = None
        self._ending: dict[int, SwapEnded] = {}  # swaps asked to end, by id, and why
        self._closed = False
        # Each swap with the path as sent; its state shows the path escaped (`shown`).
        self._queue: queue.SimpleQueue[tuple[SwapState, str] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def start(self, path: str, *, now: bool, name: str) -> dict[str, Any]:
        served = self._policy
        if served.config_json is None:
            raise PolicyError("this daemon's inference process has no config to build from")
        if not served.serving:
            raise PolicyError("the inference process is not serving now; swap once it is")
        with self._lock:
            current = self._current
            if self._closed:
                raise PolicyError("the daemon is stopping")
            if current is not None and current.phase == "building":
                raise PolicyError(
                    f"a swap to {current.path} is being built; swap once it is switching or "
                    "done, or end it with `tempo swap --cancel`"
                )
            state = SwapState(next(self._ids), shown(path, TEXT_CHARS), name, now)
            if current is not None and current.phase == "switching":
                # The swap thread ends it (its robots go back to the old policy), then builds this.
                replaced = SwapEnded("replaced", f"replaced by the swap to {state.path}")
                self._ending[current.id] = replaced
            self._current = state
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="tempo-swap")
                self._thread.daemon = True
                self._thread.start()
        self._queue.put((state, path))
        return state.as_dict()

    def cancel(self, wait_s: float = 0.0) -> dict[str, Any]:
        """End the swap under way (`tempo swap --cancel`): its new process ends and the old
        policy serves every robot; its state once ended, waited for up to `wait_s` (the status
        socket's command waits not at all: its one thread answers everyone, and the CLI
        polls status instead). PolicyError when no swap is under way."""
        with self._lock:
            current = self._current
            if current is None or not current.under_way:
                raise PolicyError("no swap is under way; nothing was cancelled")
            ended = SwapEnded("cancelled", "cancelled by `tempo swap --cancel`")
            self._ending[current.id] = ended
            build = self._build
        if build is not None:
            build.cancel_build()  # its wait ends at once; the swap thread ends the process
        deadline = time.monotonic() + wait_s
        while current.under_way and time.monotonic() < deadline:
            time.sleep(0.02)
        return current.as_dict()

    def _ended(self, state: SwapState) -> SwapEnded | None:
        """Why `state`'s swap was asked to end, if it was."""
        with self._lock:
            return self._ending.get(state.id)

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            self._run(*item)

    def _run(self, state: SwapState, path: str) -> None:
        try:
            detail = self._swap(state, path)
        except PolicyError as exc:
            # Replaced or cancelled (a cancelled build fails as its wait is cut short), or
            # timed out; else it failed.
            ended = exc if isinstance(exc, SwapEnded) else self._ended(state)
            if ended is not None:
                state.robots_moved = 0 if state.switched is not None else None
                after = "nothing was changed" if state.switched is None else (
                    "every robot is served by the old policy again"
                )  # fmt: skip
                state.finish(ended.phase, f"{ended}; {after}")
                log.warning("swap to %s: %s", state.path, state.detail)
                return
            detail = str(exc)
            if state.switched is None and "nothing was changed" not in detail:
                detail += "; nothing was changed"  # failed before the switch: the old serves on
            state.finish("failed", detail)
            log.error("swap to %s failed: %s", state.path, state.detail)
        except Exception as exc:  # noqa: BLE001 - a bug of ours: the swap fails, serving goes on
            state.finish("failed", f"the swap failed ({type(exc).__name__}: {exc})")
            log.exception("swap to %s failed", state.path)
        else:
            state.finish("done", detail)
            log.info("swap: %s", state.detail)
        finally:
            with self._lock:
                self._ending.pop(state.id, None)

    def _swap(self, state: SwapState, path: str) -> str:
        served = self._policy
        if served.config_json is None:  # checked by start(); a swap cannot unset it
            raise PolicyError("this daemon's inference process has no config to build from")
        if (ended := self._ended(state)) is not None:  # replaced or cancelled while queued
            raise ended
        config_json = config_with_path(served.config_json, path)
        spawner = served.spawner_for(config_json)
        try:
            build = HotBuild(spawner, served.start_timeout_s)
        except OSError as exc:
            raise PolicyError(f"no new inference process could start: {exc}") from None
        with self._lock:
            if self._closed:
                build.cancel(0.0)
                raise PolicyError("the daemon is stopping")
            self._build = build
        state.pid = build.pid
        try:
            hello = build.wait(served.start_timeout_s)
            check_compatible(served.spec, hello.spec)  # set since it first served (start)
            with served.switch_lock:  # never beside a restart or a take-over
                if (ended := self._ended(state)) is not None:
                    raise ended
                if not served.serving or served.stopping:
                    raise PolicyError(
                        "the inference process failed while the new policy was built; "
                        "nothing was changed"
                    )
                if state.now:
                    state.switched = served.switch_to(build.child, hello, spawner, config_json)
                else:
                    incoming = served.begin_incoming(build.child, hello, spawner, config_json)
                    state.switched = time.time()
        except BaseException:
            build.cancel()
            raise
        finally:
            with self._lock:
                self._build = None
        if state.now:
            return f"every robot is served by {state.path} (process {build.pid})"
        return self._follow(state, incoming)

    def _follow(self, state: SwapState, incoming: Incoming) -> str:
        """Robots move at their episode start: show how many have, and once none is left on
        the old process make the new one the serving process; PolicyError if the new one
        failed meanwhile (the old one serves every robot again), SwapEnded if the swap was
        replaced, cancelled or timed out."""
        served = self._policy
        serves = f"{state.path} (process {incoming.pid}) serves each robot from its episode start"
        state.phase, state.detail = "switching", serves
        deadline = time.monotonic() + self._episode_timeout_s
        while not incoming.ended.wait(0.05):
            state.robots_moved, state.robots_on_old = incoming.on_new, incoming.on_old
            if incoming.on_old is not None:
                state.detail = (
                    f"{serves}: {incoming.on_new} moved, {incoming.on_old} still on the old policy"
                )
            if served.stopping:
                raise PolicyError("the daemon stopped during the swap")
            ended = self._ended(state)
            if ended is None and time.monotonic() > deadline:
                ended = SwapEnded("timed_out", self._timed_out(incoming.on_old))
            if ended is not None:
                with served.switch_lock:
                    if served.abandon_incoming(incoming, str(ended)):
                        raise ended
                continue  # it ended otherwise meanwhile (done, or the new process failed)
            if incoming.all_moved.is_set():
                with served.switch_lock:
                    served.finish_incoming(incoming)
        state.robots_moved, state.robots_on_old = incoming.on_new, 0
        if incoming.failure is not None:
            state.robots_moved = 0
            raise PolicyError(f"the swap was aborted: {incoming.failure}")
        return f"every robot is served by {state.path} (process {incoming.pid}): {incoming.outcome}"

    def _timed_out(self, on_old: int | None) -> str:
        waited = f"timed out after {self._episode_timeout_s:g} s"
        if on_old is None:
            return f"{waited} (supervision.episode_swap_timeout_s) before any robot was counted"
        robots = "1 robot" if on_old == 1 else f"{on_old} robots"
        return (
            f"{waited} (supervision.episode_swap_timeout_s) with {robots} still on the old "
            "policy, not having started an episode"
        )

    def status(self) -> dict[str, Any] | None:
        current = self._current
        return current.as_dict() if current is not None else None

    def close(self) -> None:
        """Stop a swap under way (its new process is ended); no new one starts."""
        with self._lock:
            self._closed = True
            build, self._build = self._build, None
        if build is not None:
            build.cancel(0.2)
        self._queue.put(None)  # the thread ends (after the swap under way, if any)


def swap_command(
    policies: Mapping[str, ServedPolicy],
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The status socket's `swap` command for the daemon's policies by name (status_server):
    {"kind": "swap", "path": str, "now": bool, "policy": str | None} -> {"swap": its state},
    {"kind": "swap", "cancel": true, "policy": ...} ends the swap under way (`cancel_swap`),
    or {"error": one sentence} when refused."""

    def swap(request: dict[str, Any]) -> dict[str, Any]:
        path, name, cancel = request.get("path"), request.get("policy"), request.get("cancel")
        if cancel and path is not None:
            return {"error": "a swap request either names a new checkpoint or cancels, not both"}
        if not cancel and (not isinstance(path, str) or not path):
            return {"error": "a swap needs the new checkpoint's path"}
        if name is not None and not isinstance(name, str):
            return {"error": "a swap's policy name must be text"}
        if name is None and len(policies) > 1:
            served = ", ".join(repr(n) for n in policies)
            return {"error": f"this daemon serves several policies ({served}); name one with "
                             "--policy"}  # fmt: skip
        try:
            name = resolve_policy_name(name, tuple(policies))
            if isinstance(path, str):
                return {"swap": policies[name].swap(path, now=bool(request.get("now")), name=name)}
            return {"swap": policies[name].cancel_swap()}
        except PolicyError as exc:
            return {"error": str(exc)}

    return swap
