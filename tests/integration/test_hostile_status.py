"""Hostile users of the status socket (issue 51, finding 1): another local user (`nobody`) must
not swap the served policy or mark recordings, on the default tcp:// bind or on ipc://, while
the daemon's own user still can, and `status` is readable as server.status_readers says.

The other user is a forked child of this (root) test process that drops to nobody's uid and
gid, asks the daemon, and reports the reply through a pipe.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import zmq

from controller.cli import main
from controller.config import load_config
from controller.daemon.security import status_access
from controller.observe.request_signature import endpoint_port, sign
from controller.observe.status_server import StatusServer, request_command, request_status
from controller.observe.status_token import read_token
from tests.conftest import StreamingDriver, wait_for

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="SO_PEERCRED and setuid are Linux's"),
    pytest.mark.skipif(
        os.geteuid() != 0, reason="becoming another user (nobody) for the attack needs root"
    ),
]

OVERRIDES = ("supervision.standby=off",)  # no spare competing for the 2-core CPU


def _nobody() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("this host has no user nobody to attack as")


def as_nobody(ask: Callable[[zmq.Context], Any]) -> Any:
    """`ask(context)` run by a forked child as user nobody; what it returned (JSON)."""
    nobody = _nobody()
    readable, writable = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(readable)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            payload = json.dumps({"reply": ask(zmq.Context())}, default=str)
        except BaseException as exc:  # reported to the parent, which fails the test
            payload, code = json.dumps({"child_failed": repr(exc)}), 1
        os.write(writable, payload.encode())
        os._exit(code)
    os.close(writable)
    chunks = []
    with os.fdopen(readable, "rb") as pipe:
        while chunk := pipe.read(65536):
            chunks.append(chunk)
    os.waitpid(pid, 0)
    result = json.loads(b"".join(chunks))
    assert "child_failed" not in result, result
    return result["reply"]


def nobody_asks(endpoint: str, request: dict[str, Any] | None, token: str | None = None) -> Any:
    """A request (None: a plain status request) sent as nobody; the reply, None if none came."""
    if request is None:
        return as_nobody(lambda context: request_status(endpoint, 3.0, context))
    if token is not None:  # signed with a guessed token
        request = sign(token.encode(), endpoint_port(endpoint), request)
    return as_nobody(lambda context: request_command(endpoint, request, 3.0, context))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _nobodys_checkpoint() -> str:
    """A checkpoint folder that nobody owns (what the attacker would swap in)."""
    folder = tempfile.mkdtemp(prefix="nobodys-weights-")
    nobody = _nobody()
    os.chown(folder, nobody.pw_uid, nobody.pw_gid)
    return folder


@contextmanager
def tempo_serve(tmp_path: Path, status_bind: str, *overrides: str) -> Iterator[str]:
    """`tempo serve` (reach policy) with its status on `status_bind`; yields that endpoint."""
    token_file = tmp_path / "state" / "status.token"
    settings = [
        f"server.bind=ipc://{tmp_path}/tempo.sock",
        f"server.status_bind={status_bind}",
        f"server.status_token={token_file}",
        *OVERRIDES,
        *overrides,
    ]
    args = [sys.executable, "-m", "controller.cli", "serve", "--log-level", "INFO"]
    for setting in settings:
        args += ["--set", setting]
    log = open(tmp_path / f"daemon-{time.monotonic_ns()}.log", "w")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(
            lambda: (
                process.poll() is not None
                or request_status(status_bind, 0.2, token=read_token(token_file))
            ),
            timeout=180,
        )
        if process.poll() is not None:
            pytest.fail(f"daemon exited at start: {Path(log.name).read_text()}")
        yield status_bind
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
        log.close()


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out + err


def test_nobody_cannot_swap_or_mark_on_the_default_tcp_status_socket(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    token_file = tmp_path / "state" / "status.token"
    weights = _nobodys_checkpoint()
    with tempo_serve(tmp_path, endpoint):
        driver = StreamingDriver(f"ipc://{tmp_path}/tempo.sock").start()
        try:
            wait_for(lambda: sum(r.kind == "action" for r in driver.records) >= 5, 30)
            swap = {"kind": "swap", "path": weights, "now": True, "policy": None}
            refused_swap = nobody_asks(endpoint, swap)
            refused_mark = nobody_asks(endpoint, {"kind": "mark", "robot": None, "reason": "x"})
            guessed = nobody_asks(endpoint, swap, token="0" * 64)
            # A request the owner signed, seen and sent again by nobody (and by the owner).
            owners = sign(read_token(token_file) or b"", endpoint_port(endpoint), swap)
            mark = {"kind": "mark", "robot": "nobody's", "reason": "replayed"}
            owners_mark = sign(read_token(token_file) or b"", endpoint_port(endpoint), mark)
            first = request_command(endpoint, owners_mark, 2.0)
            replayed = nobody_asks(endpoint, owners_mark)
            stale = {**owners, "auth": {**owners["auth"], "time": owners["auth"]["time"] - 3600}}
            restamped = nobody_asks(endpoint, stale)
            status = nobody_asks(endpoint, None)  # status_readers' default on tcp: any
            # The daemon's user, with its token (the CLI reads it from server.status_token).
            token = ["--connect", endpoint, "--set", f"server.status_token={token_file}"]
            swapped = _cli(capsys, "swap", *token, "--policy", "arm", "--path", weights)
            marked = _cli(capsys, "mark", *token, "--robot", "good", "operator check")
            seen = len(driver.records)
            wait_for(lambda: sum(r.kind == "action" for r in driver.records[seen:]) >= 5, 30)
            after = request_status(endpoint, 2.0)
        finally:
            driver.stop()
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    for reply in (refused_swap, refused_mark):
        assert set(reply) == {"error"}, reply
        assert (
            "needs a signature with the daemon's status token and this request came without one"
            in reply["error"]
        )
        assert "\n" not in reply["error"] and "Traceback" not in reply["error"]
    assert "holds a wrong one" in guessed["error"]
    assert first == {"error": 'no robot named "nobody\'s" is connected, so nothing was marked'}
    assert "was answered once already" in replayed["error"]
    assert "holds a wrong one" in restamped["error"]  # the time is signed too
    assert status is not None and "error" not in status and "policy" in status
    # The owner's commands reached their handlers: the swap's own refusal, the mark kept or
    # said why not for robot good.
    assert swapped[0] == 2 and "no policy named 'arm' is served here" in swapped[1], swapped
    assert "tempo mark:" in marked[1] and "good" in marked[1], marked
    assert "status token" not in swapped[1] + marked[1]
    assert after is not None and weights not in json.dumps(after, default=str)


def test_nobody_cannot_swap_or_mark_on_an_ipc_status_socket_it_may_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = Path(tempfile.mkdtemp(prefix="tempo-status-"))  # nobody may enter it
    folder.chmod(0o755)
    endpoint = f"ipc://{folder}/status.sock"
    weights = _nobodys_checkpoint()
    with tempo_serve(tmp_path, endpoint, "server.status_readers=any"):
        mode = stat.S_IMODE((folder / "status.sock").stat().st_mode)
        swap = {"kind": "swap", "path": weights, "now": True, "policy": None}
        refused_swap = nobody_asks(endpoint, swap, token="whatever")
        refused_mark = nobody_asks(endpoint, {"kind": "mark", "robot": None, "reason": None})
        status = nobody_asks(endpoint, None)
        swapped = _cli(capsys, "swap", "--connect", endpoint, "--policy", "arm", "--path", weights)
        marked = _cli(capsys, "mark", "--connect", endpoint)
    assert mode == 0o666  # status_readers: any lets others connect; commands are checked
    uid = _nobody().pw_uid
    for reply in (refused_swap, refused_mark):
        assert set(reply) == {"error"}, reply
        assert "only the daemon's user (uid 0), root may ask for the" in reply["error"]
        assert f"not uid {uid}" in reply["error"]
    assert status is not None and "error" not in status and "policy" in status
    assert swapped[0] == 2 and "no policy named 'arm' is served here" in swapped[1], swapped
    assert "no robot is connected, so nothing was marked" in marked[1], marked


# -- the status server alone, as the daemon configures it ------------------------------------------


@contextmanager
def status_server(tmp_path: Path, *overrides: str) -> Iterator[tuple[StatusServer, list[dict]]]:
    """A StatusServer with the access `tempo serve` gives it for these settings, and a `swap`
    command that records what reached it."""
    config = load_config(None, [f"server.status_token={tmp_path}/state/token", *overrides])
    server = StatusServer(
        zmq.Context.instance(),
        config.server.status_bind,
        lambda: {"tick": 7},
        access=status_access(config.server),
    )
    reached: list[dict] = []
    server.commands["swap"] = lambda request: reached.append(request) or {"swap": {"id": 1}}
    server.start()
    try:
        yield server, reached
    finally:
        server.stop()


def test_status_readers_owner_refuses_nobody_the_status_on_tcp(tmp_path: Path) -> None:
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    with status_server(tmp_path, f"server.status_bind={endpoint}", "server.status_readers=owner"):
        token = read_token(tmp_path / "state" / "token")
        refused = nobody_asks(endpoint, None)
        owner_without_token = request_status(endpoint, 2.0)
        owner = request_status(endpoint, 2.0, token=token)
    assert refused == {
        "error": "the status needs a signature with the daemon's status token and this request "
        "came without one; ask as the daemon's user, who can read the token file "
        "(server.status_token)"
    }
    assert owner_without_token is not None and "error" in owner_without_token
    assert owner == {"tick": 7}


def test_an_ipc_status_socket_file_is_the_owners_only_by_default(tmp_path: Path) -> None:
    folder = Path(tempfile.mkdtemp(prefix="tempo-status-"))
    folder.chmod(0o755)
    endpoint = f"ipc://{folder}/status.sock"
    old_umask = os.umask(0)  # what a careless service manager may leave: files 0777
    try:
        context = status_server(tmp_path, f"server.status_bind={endpoint}")
        with context as (_, reached):
            os.umask(old_umask)
            mode = stat.S_IMODE((folder / "status.sock").stat().st_mode)
            unanswered = nobody_asks(endpoint, {"kind": "swap", "path": "/tmp", "now": True})
            # Made connectable by hand: the peer check still refuses nobody's command.
            (folder / "status.sock").chmod(0o666)
            refused = nobody_asks(endpoint, {"kind": "swap", "path": "/tmp", "now": True})
            status = nobody_asks(endpoint, None)
            owner = request_command(endpoint, {"kind": "swap", "path": "/x"}, 2.0)
    finally:
        os.umask(old_umask)
    assert mode == 0o600
    assert unanswered is None  # the kernel refuses the connection
    assert "only the daemon's user (uid 0), root may ask for the swap command" in refused["error"]
    assert "only the daemon's user" in status["error"]  # status_readers' ipc default: owner
    assert owner == {"swap": {"id": 1}} and reached == [{"kind": "swap", "path": "/x"}]


def test_a_tcp_status_socket_whose_token_others_can_read_is_read_only(tmp_path: Path) -> None:
    token_file = tmp_path / "state" / "token"
    token_file.parent.mkdir()
    token_file.write_text("a" * 64)
    token_file.chmod(0o644)  # readable by every local user: not a secret any more
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    with status_server(tmp_path, f"server.status_bind={endpoint}") as (_, reached):
        refused = request_command(endpoint, {"kind": "swap", "path": "/x"}, 2.0, token=b"a" * 64)
        status = request_status(endpoint, 2.0)
    assert refused is not None and refused["error"].startswith(
        "this status socket is read-only, so it refuses the swap command: the daemon has no "
        f"status token (the status token {token_file} has mode 644"
    )
    assert reached == [] and status == {"tick": 7}


def test_a_flood_of_refused_commands_is_logged_once_and_the_socket_still_answers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    with status_server(tmp_path, f"server.status_bind={endpoint}") as (server, reached):
        token = read_token(tmp_path / "state" / "token")
        replies = [
            request_command(endpoint, {"kind": "swap", "path": "/x"}, 2.0) for _ in range(50)
        ]
        signed = request_command(endpoint, {"kind": "swap", "path": "/y"}, 2.0, token=token)
    assert all(reply is not None and "came without one" in reply["error"] for reply in replies)
    logged = [r for r in caplog.records if "status socket:" in r.getMessage()]
    assert len(logged) == 1 and server.refused == 50
    assert signed == {"swap": {"id": 1}} and [r["path"] for r in reached] == ["/y"]


def test_a_member_of_the_status_group_commands_on_ipc(tmp_path: Path) -> None:
    import grp

    group = grp.getgrgid(_nobody().pw_gid).gr_name  # nobody's own group: it is a member
    folder = Path(tempfile.mkdtemp(prefix="tempo-status-"))
    folder.chmod(0o755)
    endpoint = f"ipc://{folder}/status.sock"
    overrides = (f"server.status_bind={endpoint}", f"server.status_group={group}")
    with status_server(tmp_path, *overrides) as (_, reached):
        info = (folder / "status.sock").stat()
        answered = nobody_asks(endpoint, {"kind": "swap", "path": "/by-the-group"})
    assert (stat.S_IMODE(info.st_mode), info.st_gid) == (0o660, _nobody().pw_gid)
    assert answered == {"swap": {"id": 1}}
    assert reached == [{"kind": "swap", "path": "/by-the-group"}]
