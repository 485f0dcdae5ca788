"""The client of one LeRobot robot: it declares the robot's features as Tempo's joints, state and
cameras (controller.drive.feature_map), and the daemon's hello check says whether the served
policy was trained for them. A refusal is one sentence saying which of the robot's features
became what, and what the daemon found wrong (the joints, the state size or a camera), so
that the fix (another checkpoint, `policy.joint_names`, the camera's flags) is plain.
"""

from __future__ import annotations

from pathlib import Path

from controller.drive.feature_map import FeatureMap
from controller.errors import ErrorCode, HandshakeRefused, SpecMismatchError
from controller.wire.client import TempoClient


def connect_drive_client(
    endpoint: str,
    features: FeatureMap,
    robot_name: str,
    *,
    task: str | None = None,
    policy: str | None = None,
    client_secret_key: Path | None = None,
    server_public_key: Path | None = None,
    handshake_timeout_s: float = 5.0,
) -> TempoClient:
    """A connected client declaring `features`. SpecMismatchError (one sentence naming the
    robot's features) when the served policy expects another robot; the client's own
    HandshakeRefused and DaemonUnavailable otherwise."""
    client = TempoClient(
        endpoint,
        robot_name,
        features.joints,
        features.cameras,
        len(features.state),
        task=task,
        policy=policy,
        client_secret_key=client_secret_key,
        server_public_key=server_public_key,
        handshake_timeout_s=handshake_timeout_s,
    )
    try:
        client.connect()
    except HandshakeRefused as exc:
        client.close()
        if exc.code != ErrorCode.SPEC_MISMATCH.value:
            raise
        detail = str(exc).split("): ", 1)[-1]
        raise SpecMismatchError(f"{mapped_features(features)}, {detail}") from None
    except BaseException:
        client.close()
        raise
    return client


def mapped_features(features: FeatureMap) -> str:
    """The start of a refusal: which features of the robot were declared as what."""
    cameras = ", ".join(f"{n!r} {h}x{w}" for n, (h, w) in features.cameras.items()) or "none"
    return (
        f"the served policy does not fit robot {features.robot}, whose action features "
        f"{list(features.joints)} are the joints, whose {len(features.state)} float "
        f"observation features are the state and whose image features are the cameras "
        f"({cameras}): the daemon says"
    )
