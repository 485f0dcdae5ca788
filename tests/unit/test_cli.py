"""The `tempo` command's own logic: what it asks of the serve extra, and sim-robot's options."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from controller import cli
from controller.config_sections import ServerConfig
from controller.sim import sim_cli

REPO = Path(__file__).resolve().parents[2]


def _raise(exc: BaseException):
    def command(args):
        raise exc

    return command


def test_serve_extra_modules_match_pyproject():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    serve = project["optional-dependencies"]["serve"]
    names = {re.match(r"[A-Za-z0-9_.-]+", requirement).group(0) for requirement in serve}
    assert names == set(cli.SERVE_EXTRA_MODULES.values())
    base = {
        re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)
        for requirement in project["dependencies"]
    }
    assert base == {"numpy", "pyzmq", "msgpack"}


def test_default_bind_is_the_configs():
    assert sim_cli.DEFAULT_BIND == ServerConfig().bind


def test_a_missing_serve_extra_module_ends_with_one_sentence(monkeypatch, capsys):
    missing = ModuleNotFoundError("No module named 'yaml'", name="yaml")
    monkeypatch.setattr(cli, "cmd_config_show", _raise(missing))
    assert cli.main(["config", "show"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "tempo config needs the daemon's dependencies (torch, einops, pydantic, PyYAML, "
        "safetensors, sentencepiece, mcap) and PyYAML is not installed: "
        "pip install 'tempo-controller[serve]'\n"
    )


@pytest.mark.parametrize("name", ["prometheus_client", "torch._C", "torchvision", None])
def test_other_missing_modules_are_not_swallowed(monkeypatch, capsys, name):
    """Only the absence of one of the extra's own packages is the user's to fix by installing
    the extra; a missing submodule of an installed one is a broken install, anything else a bug:
    said as one, in one sentence, with the traceback in a file."""
    missing = ModuleNotFoundError(f"No module named {name!r}", name=name)
    monkeypatch.setattr(cli, "cmd_config_show", _raise(missing))
    assert cli.main(["config", "show"]) == 70
    err = capsys.readouterr().err
    assert err.startswith("tempo: internal error, a bug in Tempo (ModuleNotFoundError: ")
    assert "pip install" not in err


def test_a_bug_is_one_sentence_and_the_traceback_goes_to_a_file(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setattr(cli, "cmd_config_show", _raise(IndexError("index -1 is out of bounds")))
    assert cli.main(["config", "show"]) == 70
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "IndexError: index -1 is out of bounds" in err
    (report,) = tmp_path.glob("tempo-error-*.txt")
    assert str(report) in err
    assert "Traceback" in report.read_text() and "IndexError" in report.read_text()


def test_sim_robot_description_from_options():
    args = cli.build_parser().parse_args(
        ["sim-robot", "--joints", "a, b,c", "--camera", "front=96x128", "--camera", "wrist=48x64"]
    )
    joints, cameras, state_size, endpoint = sim_cli.sim_robot_description(args, cli._load)
    assert joints == ["a", "b", "c"]
    assert cameras == {"front": (96, 128), "wrist": (48, 64)}
    assert state_size == 3
    assert endpoint == sim_cli.DEFAULT_BIND


def test_sim_robot_options_still_read_a_given_config():
    args = cli.build_parser().parse_args(
        ["sim-robot", "--joints", "a", "--set", "server.bind=ipc:///tmp/tempo-x.sock"]
    )
    assert sim_cli.sim_robot_description(args, cli._load)[3] == "ipc:///tmp/tempo-x.sock"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--joints", "a,,b"], "--joints 'a,,b': expected comma-separated joint names"),
        (["--joints", "a", "--camera", "front"], "--camera 'front': expected NAME=HEIGHTxWIDTH"),
        (["--joints", "a", "--camera", "front=0x128"], "expected NAME=HEIGHTxWIDTH"),
        (["--joints", "a", "--camera", "f=1x1", "--camera", "f=2x2"], "'f' is given twice"),
        (["--camera", "front=96x128"], "--camera describes the robot together with --joints"),
        (
            ["--env", "pushT"],
            "tempo: unknown environment 'pushT'; the environments are pusht, aloha-insertion, "
            "aloha-transfer-cube, aloha-transfer-cube-state\n",
        ),
        (["--env", "pusht", "--joints", "x,y"], "--env is the robot; leave out --joints"),
        (["--env", "pusht", "--episodes", "0"], "--episodes must be at least 1, not 0"),
        (["--env", "pusht", "--max-steps", "0"], "--max-steps must be at least 1, not 0"),
    ],
)
def test_sim_robot_refuses_bad_options(capsys, options, message):
    assert cli.main(["sim-robot", *options, "--seconds", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tempo: ") and message in err


def test_a_closed_pipe_is_not_a_traceback(tmp_path):
    """`tempo config show | head -1`: the reader leaves early; tempo ends quietly."""
    import subprocess
    import sys

    process = subprocess.Popen(
        [sys.executable, "-m", "controller.cli", "config", "show"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # nobody reads: the first write raises BrokenPipeError
    stderr = process.stderr.read().decode()
    assert process.wait(60) == 141
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr


def test_profile_takes_policy_path_like_serve():
    args = cli.build_parser().parse_args(["profile", "--policy.path", "/ckpt", "--set", "x.y=1"])
    from controller.config import with_policy_path

    assert with_policy_path(args.overrides, args) == [
        "policy.kind=checkpoint",
        "policy.path=/ckpt",
        "x.y=1",
    ]
    serve = cli.build_parser().parse_args(["serve", "--policy.path", "/ckpt"])
    assert serve.policy_path == Path("/ckpt")


def test_default_status_bind_is_the_configs():
    assert cli.DEFAULT_STATUS_BIND == ServerConfig().status_bind


def test_version_is_the_installed_distributions(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"tempo {version(cli.DISTRIBUTION)}"


def test_distribution_name_is_pyprojects():
    tomllib = pytest.importorskip("tomllib")
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    assert tomllib.loads(pyproject.read_text())["project"]["name"] == cli.DISTRIBUTION


def test_the_inference_process_exits_without_teardown(tmp_path):
    """Its exit skips the interpreter's teardown (seconds with a model loaded, and the daemon's
    shutdown waits for it) but keeps the exit code and flushes the logs first."""
    import subprocess
    import sys

    log_file = tmp_path / "log.txt"
    code = f"""
import atexit, logging
from controller import cli
logging.basicConfig(filename={str(log_file)!r}, level=logging.INFO)
atexit.register(lambda: print("teardown ran"))
logging.getLogger("x").info("written before exit")
cli._exit_now(3)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 3, result.stderr
    assert "teardown ran" not in result.stdout
    assert "written before exit" in log_file.read_text()


def test_eval_of_an_unknown_environment_is_one_sentence(capsys):
    assert cli.main(["eval", "--env", "aloha", "--connect", "ipc:///nonexistent"]) == 2
    assert capsys.readouterr().err == (
        "tempo: unknown environment 'aloha'; the environments are pusht, aloha-insertion, "
        "aloha-transfer-cube, aloha-transfer-cube-state\n"
    )


@pytest.mark.parametrize("video", ["9", "1,x"])
def test_eval_video_of_a_seed_not_run_is_one_sentence(capsys, video):
    args = ["eval", "--env", "pusht", "--episodes", "3", "--seed", "0", "--video", video]
    assert cli.main(args) == 2
    assert capsys.readouterr().err == (
        f"tempo: --video {video!r}: each value must be the seed of one of the episodes (0 to 2)\n"
    )
