"""controller.daemon.security without sockets: endpoints, the bind check, key files, the config."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import zmq
import zmq.auth
from pydantic import ValidationError

from controller.config_sections import SecurityConfig
from controller.daemon.security import (
    check_bind_allowed,
    check_local_only,
)
from controller.errors import SecurityError
from controller.wire.curve import is_local_endpoint, load_client_keys, secure_client
from controller.wire.keys import (
    cmd_keys_generate,
    generate_keys,
    load_authorized_keys,
    load_public_key,
    load_secret_key_pair,
)

posix_only = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def configured(tmp_path: Path) -> SecurityConfig:
    """A daemon key pair and an allowlist holding one driver's public key."""
    _, secret = generate_keys(tmp_path / "daemon", "daemon")
    driver_public, _ = generate_keys(tmp_path / "drivers", "arm0")
    authorized = tmp_path / "authorized"
    authorized.mkdir(mode=0o700)
    (authorized / driver_public.name).write_bytes(driver_public.read_bytes())
    return SecurityConfig(server_secret_key=secret, authorized_keys=authorized)


# -- is_local_endpoint ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "endpoint",
    [
        "ipc:///tmp/tempo.sock",
        "ipc://@abstract",
        "inproc://tempo",
        "tcp://127.0.0.1:5555",
        "tcp://127.0.0.1:*",
        "tcp://127.1.2.3:5555",
        "tcp://localhost:5555",
        "tcp://LOCALHOST:5555",
        "tcp://[::1]:5555",
        "tcp://::1:5555",
        "tcp://[::ffff:127.0.0.1]:5555",
    ],
)
def test_local_endpoints(endpoint):
    assert is_local_endpoint(endpoint)


@pytest.mark.parametrize(
    "endpoint",
    [
        "tcp://*:5555",
        "tcp://0.0.0.0:5555",
        "tcp://[::]:5555",
        "tcp://:::5555",
        "tcp://fe80::1:5555",
        "tcp://[*]:5555",
        "tcp://192.168.1.10:5555",
        "tcp://10.0.0.1:5555",
        "tcp://[fe80::1%eth0]:5555",
        "tcp://eth0:5555",
        "tcp://lo:5555",  # an interface name: not provably loopback, so not local
        "tcp://robot-pc.local:5555",
        "tcp://127.0.0.1.evil.example:5555",
        "tcp://localhost.evil.example:5555",
        "tcp://127.0.0.1;10.0.0.1:5555",
        "tcp://127.0.0.1",  # no port: unparsable, so not local
        "tcp://:5555",
        "tcp://[::1]5555",
        "udp://127.0.0.1:5555",
        "pgm://eth0;239.192.1.1:5555",
        "ws://127.0.0.1:5555",
        "",
    ],
)
def test_non_local_endpoints(endpoint):
    assert not is_local_endpoint(endpoint)


# -- check_bind_allowed -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "endpoint", ["tcp://0.0.0.0:5555", "tcp://*:5555", "tcp://192.168.1.10:5555"]
)
def test_bind_beyond_localhost_without_keys_is_refused(endpoint):
    with pytest.raises(SecurityError) as error:
        check_bind_allowed(endpoint, SecurityConfig())
    message = str(error.value)
    assert endpoint in message
    assert "security.server_secret_key" in message
    assert "security.authorized_keys" in message
    assert "tempo keys generate" in message


@pytest.mark.parametrize(
    "endpoint", ["tcp://127.0.0.1:5555", "ipc:///tmp/tempo.sock", "tcp://[::1]:5555"]
)
def test_local_bind_needs_no_keys(endpoint):
    check_bind_allowed(endpoint, SecurityConfig())


@pytest.mark.parametrize("endpoint", ["tcp://0.0.0.0:5555", "tcp://*:5555", "tcp://127.0.0.1:5"])
def test_bind_with_keys_is_allowed(endpoint, configured):
    check_bind_allowed(endpoint, configured)


def test_missing_secret_key_file_is_named(configured, tmp_path):
    missing = tmp_path / "nope.key_secret"
    security = configured.model_copy(update={"server_secret_key": missing})
    with pytest.raises(SecurityError, match=f"cannot read key file {missing}"):
        check_bind_allowed("tcp://0.0.0.0:5555", security)


def test_key_files_are_checked_even_for_a_local_bind(configured, tmp_path):
    security = configured.model_copy(update={"authorized_keys": tmp_path / "nowhere"})
    with pytest.raises(SecurityError, match="nowhere is not a directory"):
        check_bind_allowed("tcp://127.0.0.1:5555", security)


def test_a_directory_as_secret_key_is_refused(configured, tmp_path):
    security = configured.model_copy(update={"server_secret_key": tmp_path})
    with pytest.raises(SecurityError, match="not a regular file"):
        check_bind_allowed("tcp://*:5555", security)


@posix_only
@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads anything")
def test_unreadable_secret_key_is_named(configured):
    path = configured.server_secret_key
    path.chmod(0o000)
    try:
        with pytest.raises(SecurityError, match=f"cannot read key file {path}"):
            check_bind_allowed("tcp://*:5555", configured)
    finally:
        path.chmod(0o600)


@posix_only
def test_secret_key_readable_by_others_is_refused(configured):
    path = configured.server_secret_key
    path.chmod(0o644)
    with pytest.raises(SecurityError, match=r"accessible by other users \(mode 0644\).*chmod 600"):
        check_bind_allowed("tcp://*:5555", configured)


def test_public_key_given_as_server_secret_is_refused(configured):
    public = configured.server_secret_key.with_suffix(".key")
    security = configured.model_copy(update={"server_secret_key": public})
    with pytest.raises(SecurityError, match="holds no secret key"):
        check_bind_allowed("tcp://*:5555", security)


def test_mismatched_key_pair_is_refused(tmp_path):
    public_a, _ = zmq.curve_keypair()
    _, secret_b = zmq.curve_keypair()
    path = tmp_path / "mixed.key_secret"
    path.write_text(
        f'curve\n    public-key = "{public_a.decode()}"\n    secret-key = "{secret_b.decode()}"\n'
    )
    path.chmod(0o600)
    with pytest.raises(SecurityError, match="do not belong together"):
        load_secret_key_pair(path)


@pytest.mark.parametrize("bad", ["short", "x" * 41, "\x7f" * 40])
def test_malformed_key_is_refused(tmp_path, bad):
    path = tmp_path / "bad.key"
    path.write_text(f'curve\n    public-key = "{bad}"\n')
    with pytest.raises(SecurityError, match="not a 40-character Z85"):
        load_public_key(path)


def test_empty_allowlist_is_refused(configured, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SecurityError, match="has no .key files"):
        load_authorized_keys(empty)


def test_bad_file_in_allowlist_is_named(configured):
    bad = configured.authorized_keys / "broken.key"
    bad.write_text("garbage\n")
    with pytest.raises(SecurityError, match=f"{bad} has no public key"):
        check_bind_allowed("tcp://*:5555", configured)


def test_secret_key_in_allowlist_as_public_is_refused(configured, tmp_path):
    _, secret = generate_keys(tmp_path / "leak", "leaked")
    (configured.authorized_keys / "leaked.key").write_bytes(secret.read_bytes())
    with pytest.raises(SecurityError, match="contains a secret key"):
        load_authorized_keys(configured.authorized_keys)


def test_allowlist_reads_only_public_key_files(configured, tmp_path):
    _, secret = generate_keys(tmp_path / "other", "other")
    (configured.authorized_keys / "README").write_text("drivers allowed to connect\n")
    (configured.authorized_keys / "other.key_secret").write_bytes(secret.read_bytes())
    keys = load_authorized_keys(configured.authorized_keys)
    driver_public = load_public_key(tmp_path / "drivers" / "arm0.key")
    assert keys == frozenset({driver_public})


@posix_only
def test_allowlist_writable_by_others_is_refused(configured):
    configured.authorized_keys.chmod(0o777)
    try:
        with pytest.raises(SecurityError, match="writable by other users"):
            load_authorized_keys(configured.authorized_keys)
    finally:
        configured.authorized_keys.chmod(0o700)


# -- the config section -----------------------------------------------------------------------


def test_default_config_has_no_keys_and_is_frozen():
    security = SecurityConfig()
    assert not security.enabled
    assert security.zap_domain == "tempo"
    with pytest.raises(ValidationError):
        security.zap_domain = "other"  # type: ignore[misc]


def test_config_forbids_unknown_fields():
    with pytest.raises(ValidationError, match="extra"):
        SecurityConfig.model_validate({"server_secret": "/x"})


@pytest.mark.parametrize(
    "fields", [{"server_secret_key": "/a.key_secret"}, {"authorized_keys": "/allowed"}]
)
def test_config_needs_both_key_fields_or_neither(fields):
    with pytest.raises(ValidationError, match="go together"):
        SecurityConfig.model_validate(fields)


def test_config_with_both_fields_is_enabled():
    security = SecurityConfig.model_validate(
        {"server_secret_key": "/a.key_secret", "authorized_keys": "/allowed"}
    )
    assert security.enabled
    assert security.server_secret_key == Path("/a.key_secret")


# -- generate_keys ----------------------------------------------------------------------------


def test_generate_keys_writes_a_usable_pair(tmp_path):
    public_path, secret_path = generate_keys(tmp_path / "keys", "daemon")
    assert public_path == tmp_path / "keys" / "daemon.key"
    assert secret_path == tmp_path / "keys" / "daemon.key_secret"
    public, secret = load_secret_key_pair(secret_path)
    assert load_public_key(public_path) == public
    assert zmq.curve_public(secret) == public
    assert b"secret-key" not in public_path.read_bytes()
    # pyzmq reads the same files.
    assert zmq.auth.load_certificate(secret_path) == (public, secret)
    assert zmq.auth.load_certificate(public_path) == (public, None)


@posix_only
def test_generate_keys_file_modes(tmp_path):
    old = os.umask(0o000)  # even a permissive umask cannot loosen the secret file
    try:
        public_path, secret_path = generate_keys(tmp_path / "keys", "arm0")
    finally:
        os.umask(old)
    assert mode(secret_path) == 0o600
    assert mode(public_path) == 0o644
    assert mode(tmp_path / "keys") == 0o700


def test_generate_keys_makes_different_pairs(tmp_path):
    a, _ = generate_keys(tmp_path, "a")
    b, _ = generate_keys(tmp_path, "b")
    assert load_public_key(a) != load_public_key(b)


@pytest.mark.parametrize("existing", ["arm0.key", "arm0.key_secret"])
def test_generate_keys_never_overwrites(tmp_path, existing):
    (tmp_path / existing).write_text("precious\n")
    with pytest.raises(SecurityError, match=f"{tmp_path / existing} already exists"):
        generate_keys(tmp_path, "arm0")
    assert (tmp_path / existing).read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [existing]


def test_generate_keys_refuses_a_second_run(tmp_path):
    public_path, secret_path = generate_keys(tmp_path, "daemon")
    before = secret_path.read_bytes()
    with pytest.raises(SecurityError, match="already exists"):
        generate_keys(tmp_path, "daemon")
    assert secret_path.read_bytes() == before


@pytest.mark.parametrize("name", ["", "../escape", "a/b", ".hidden", "a b", "x" * 65])
def test_generate_keys_refuses_bad_names(tmp_path, name):
    with pytest.raises(SecurityError, match="is not allowed"):
        generate_keys(tmp_path, name)
    assert list(tmp_path.iterdir()) == []


def test_cmd_keys_generate_says_where_each_file_goes(tmp_path):
    text = cmd_keys_generate(tmp_path, "daemon")
    assert str(tmp_path / "daemon.key") in text
    assert f"security.server_secret_key: {tmp_path / 'daemon.key_secret'}" in text
    assert "pass it as server_public_key" in text
    assert "client_secret_key" not in text and "--role driver" in text


def test_a_drivers_key_pair_gets_only_the_drivers_instructions(tmp_path):
    """A driver's secret must never be offered as the daemon's server_secret_key."""
    text = cmd_keys_generate(tmp_path, "driver")
    assert f"pass {tmp_path / 'driver.key_secret'} as the driver's client_secret_key" in text
    assert "security.authorized_keys" in text
    assert "server_secret_key" not in text
    text = cmd_keys_generate(tmp_path / "other", "robot-pc", role="daemon")
    assert "security.server_secret_key" in text and "from its name" not in text


# -- the client side --------------------------------------------------------------------------


def test_client_keys_load_and_apply(tmp_path):
    server_public, _ = generate_keys(tmp_path, "daemon")
    _, driver_secret = generate_keys(tmp_path, "arm0")
    keys = load_client_keys(driver_secret, server_public)
    assert keys.secret.decode() not in repr(keys)
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    try:
        secure_client(socket, driver_secret, server_public)
        assert socket.getsockopt(zmq.MECHANISM) == zmq.CURVE
        assert socket.getsockopt(zmq.CURVE_SERVER) == 0
    finally:
        socket.close(linger=0)
        context.term()


def test_client_refuses_the_daemon_secret_as_server_key(tmp_path):
    _, server_secret = generate_keys(tmp_path, "daemon")
    _, driver_secret = generate_keys(tmp_path, "arm0")
    with pytest.raises(SecurityError, match="contains a secret key"):
        load_client_keys(driver_secret, server_secret)


def test_client_refuses_the_daemon_key_pair_as_its_own(tmp_path):
    server_public, server_secret = generate_keys(tmp_path, "daemon")
    with pytest.raises(SecurityError, match="daemon's own key pair"):
        load_client_keys(server_secret, server_public)


def test_client_keys_after_connect_are_refused(tmp_path):
    server_public, _ = generate_keys(tmp_path, "daemon")
    _, driver_secret = generate_keys(tmp_path, "arm0")
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    try:
        socket.connect("tcp://127.0.0.1:1")
        with pytest.raises(SecurityError, match="before connect"):
            secure_client(socket, driver_secret, server_public)
    finally:
        socket.close(linger=0)
        context.term()


def test_client_missing_key_file_is_named(tmp_path):
    server_public, _ = generate_keys(tmp_path, "daemon")
    missing = tmp_path / "arm0.key_secret"
    with pytest.raises(SecurityError, match=str(missing)):
        load_client_keys(missing, server_public)


# -- misc -------------------------------------------------------------------------------------


def test_status_socket_must_stay_local():
    check_local_only("tcp://127.0.0.1:5556", "server.status_bind")
    with pytest.raises(SecurityError, match="server.status_bind tcp://0.0.0.0:5556"):
        check_local_only("tcp://0.0.0.0:5556", "server.status_bind")


def test_module_imports_without_torch():
    code = (
        "import sys; import controller.daemon.security; "
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
