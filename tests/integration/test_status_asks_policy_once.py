"""A daemon's status asks the default policy for its status once for both places it shows it
(`policy` and its line in `policies`): a remote policy's status reads /proc for each process."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import ipc_config, running_daemon


def test_the_default_policys_status_is_read_once_per_daemon_status(tmp_path: Path) -> None:
    with running_daemon(ipc_config(tmp_path)) as daemon:
        policy = daemon.lanes.default.policy
        answered: list[dict] = []
        original = policy.status

        def counted() -> dict:
            answered.append(original())
            return answered[-1]

        policy.status = counted
        status = daemon.status()
        name = daemon.lanes.default.name
        line = status["policies"][name]["policy"]
        assert status["policy"] is line  # the one answer, shown twice
        assert sum(a is line for a in answered) == 1
        assert status["policy"]["tiers"]  # the policy's own status, as before
