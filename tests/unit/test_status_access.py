"""Who may ask what on the status socket (controller.observe.status_access) and the status token
file (controller.observe.status_token): the decisions alone, without sockets."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from controller.config import load_config
from controller.daemon.security import status_access
from controller.errors import SecurityError
from controller.observe.request_signature import WINDOW_S, sign
from controller.observe.status_access import StatusAccess, peer_credentials
from controller.observe.status_token import ensure_token, read_token

OWNER = os.geteuid()
OTHER = 65534 if OWNER != 65534 else 65533


def _peer(uid: int, gid: int = 4242) -> str:
    return f"localhost:{uid}:{gid}:1234"


def test_peer_credentials_come_from_an_ipc_peer_address_only() -> None:
    credentials = peer_credentials("localhost:1000:1001:42")
    assert credentials is not None and (credentials.uid, credentials.gid, credentials.pid) == (
        1000,
        1001,
        42,
    )
    for address in (None, "", "127.0.0.1", "localhost:a:1:2", "1:2"):
        assert peer_credentials(address) is None


def _asks(access: StatusAccess, kind: str, peer: str | None) -> str | None:
    mutating = kind != "status"
    return access.refusal(kind, mutating=mutating, peer=peer, request={"token": "x"}, port=1)


def test_on_ipc_commands_are_for_the_daemons_user_root_and_its_group() -> None:
    access = StatusAccess.ipc("owner", group_gid=4242)
    assert _asks(access, "swap", _peer(OWNER)) is None
    assert _asks(access, "swap", _peer(0)) is None
    assert _asks(access, "mark", _peer(OTHER, 4242)) is None
    refused = _asks(access, "mark", _peer(OTHER, 7))
    assert refused is not None and f"not uid {OTHER}" in refused
    unknown = _asks(access, "swap", "127.0.0.1")
    assert unknown is not None and "cannot tell which user" in unknown


def test_status_readers_say_who_reads_the_status() -> None:
    anyone, owner = StatusAccess.ipc("any"), StatusAccess.ipc("owner")
    assert _asks(anyone, "status", _peer(OTHER)) is None
    assert _asks(anyone, "swap", _peer(OTHER)) is not None
    assert _asks(owner, "status", _peer(OTHER)) is not None
    assert (anyone.socket_mode, owner.socket_mode) == (0o666, 0o600)
    assert StatusAccess.ipc("owner", group_gid=5).socket_mode == 0o660


def test_on_tcp_a_command_needs_a_fresh_signature_with_the_token() -> None:
    token = b"f" * 64
    access = StatusAccess.tcp("any", token)
    swap = {"kind": "swap", "path": "/x", "now": True}

    def refusal(request: dict, port: int = 5556) -> str | None:
        return access.refusal("swap", mutating=True, peer="127.0.0.1", request=request, port=port)

    signed = sign(token, 5556, swap)
    assert refusal(signed) is None
    assert "was answered once already" in (refusal(signed) or "")  # the same nonce again
    assert "holds a wrong one" in (refusal(sign(token, 5557, swap)) or "")  # another port's
    changed = {**sign(token, 5556, swap), "path": "/elsewhere"}  # a field changed after
    assert "holds a wrong one" in (refusal(changed) or "")
    assert "holds a wrong one" in (refusal(sign(b"g" * 64, 5556, swap)) or "")
    for auth in (None, "mac", {"time": 1.0}, {"time": "now", "nonce": "n", "mac": "m"}):
        request = {**swap, "auth": auth} if auth is not None else swap
        refused = refusal(request)
        assert refused is not None and "status token" in refused and "\n" not in refused, auth
    assert refusal({**sign(token, 5556, swap), 1: "int key"}) is not None  # json cannot sort it
    read_only = StatusAccess.tcp("any", None, "it could not be made")
    refused = read_only.refusal(
        "mark", mutating=True, peer="127.0.0.1", request=sign(token, 1, swap), port=1
    )
    assert refused == (
        "this status socket is read-only, so it refuses the mark command: the daemon has no "
        "status token (it could not be made)"
    )


def test_a_signature_is_good_for_a_minute_only(monkeypatch: pytest.MonkeyPatch) -> None:
    token = b"f" * 64
    access = StatusAccess.tcp("any", token)
    signed = sign(token, 1, {"kind": "mark"})
    later = time.time() + WINDOW_S + 5
    monkeypatch.setattr(time, "time", lambda: later)
    refused = access.refusal("mark", mutating=True, peer=None, request=signed, port=1)
    assert refused is not None and "more than 60 s from now" in refused


def test_the_token_is_made_once_0600_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "state" / "status.token"
    old = os.umask(0)
    try:
        token = ensure_token(path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert len(token) == 64 and int(token, 16) >= 0
    assert ensure_token(path) == token == read_token(path)
    assert read_token(tmp_path / "missing") is None


@pytest.mark.parametrize("problem", ["others_read", "other_owner", "symlink", "short", "folder"])
def test_a_token_file_others_may_know_is_refused(tmp_path: Path, problem: str) -> None:
    path = tmp_path / "status.token"
    real = tmp_path / "real.token"
    real.write_text("a" * 64)
    real.chmod(0o600)
    if problem == "others_read":
        real.chmod(0o644)
        real.rename(path)
    elif problem == "other_owner":
        if OWNER != 0:
            pytest.skip("giving a file to another user needs root")
        os.chown(real, OTHER, OTHER)
        real.rename(path)
    elif problem == "symlink":
        path.symlink_to(real)
    elif problem == "short":
        real.write_text("abc")
        real.rename(path)
    else:
        path.mkdir()
    with pytest.raises(SecurityError) as refused:
        ensure_token(path)
    assert "status token" in str(refused.value) and "\n" not in str(refused.value)


def test_the_daemon_side_reads_the_server_section(tmp_path: Path) -> None:
    ipc = load_config(None, [f"server.status_bind=ipc://{tmp_path}/s.sock"]).server
    assert status_access(ipc) == StatusAccess.ipc("owner")
    blocked = tmp_path / "file"
    blocked.write_text("")
    tcp = load_config(None, [f"server.status_token={blocked}/token"]).server  # cannot be made
    access = status_access(tcp)
    assert access.transport == "tcp" and access.signatures is None
    assert "cannot create the status token" in access.token_problem
    unknown = load_config(None, ["server.status_group=no-such-group-here"]).server
    with pytest.raises(SecurityError, match="is not a group on this host"):
        status_access(unknown)


def test_with_a_status_group_the_token_is_the_groups_to_read(tmp_path: Path) -> None:
    if OWNER != 0:
        pytest.skip("giving a file to a group the test user may not be in needs root")
    path = tmp_path / "status.token"
    token = ensure_token(path, group_gid=4242)
    info = path.stat()
    assert (stat.S_IMODE(info.st_mode), info.st_gid) == (0o640, 4242)
    assert ensure_token(path, group_gid=4242) == token
    with pytest.raises(SecurityError, match="has mode 640"):
        ensure_token(path)  # the group is no longer configured: others-of-the-owner may read it
