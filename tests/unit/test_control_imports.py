"""The control process of `tempo serve` never loads torch: the GIL and the CPU it would take
belong to the control loop (torch lives in the inference process). pyproject.toml's import
contract says so statically; this imports every module of the control process for real."""

from __future__ import annotations

import importlib.util
import pkgutil
import subprocess
import sys

# The control process's packages and top-level modules (controller.inference is the other side).
CONTROL_ROOTS = (
    "controller.cli",
    "controller.app",
    "controller.config",
    "controller.config_sections",
    "controller.policy_sections",
    "controller.runner_config",
    "controller.link",
    "controller.daemon",
    "controller.action",
    "controller.wire",
    "controller.observe",
)


def control_modules() -> list[str]:
    """Every module under CONTROL_ROOTS, found by walking the packages (not listed by hand)."""
    names = []
    for root in CONTROL_ROOTS:
        names.append(root)
        spec = importlib.util.find_spec(root)
        assert spec is not None, f"{root} is gone: update CONTROL_ROOTS"
        if spec.submodule_search_locations is not None:  # a package
            found = pkgutil.walk_packages(spec.submodule_search_locations, prefix=f"{root}.")
            names += sorted(module.name for module in found)
    return names


def test_the_walk_finds_each_packages_modules() -> None:
    names = control_modules()
    for package in ("controller.link", "controller.daemon", "controller.wire"):
        assert sum(n.startswith(f"{package}.") for n in names) >= 3
    assert "controller.link.remote_policy" in names and "controller.daemon.service" in names


def test_the_control_process_modules_import_without_torch() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {control_modules()!r}:\n"
        "    importlib.import_module(name)\n"
        "    if 'torch' in sys.modules:\n"
        "        sys.exit(f'{name} loads torch')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_validating_every_family_section_loads_no_torch() -> None:
    """The config validates each `policy.<section>` with its family's model, found through the
    registry (which loads every family.py): none of that may load torch."""
    code = (
        "import sys\n"
        "from controller.config import load_config\n"
        "config = load_config(None, ['policy.rtc.mode=exact', 'execution.ensemble=newest',\n"
        "                            'policy.tdmpc2.mode=prior', 'policy.reach.target=[1]',\n"
        "                            'policy.prompt.default_task=wave'])\n"
        "assert set(config.policy.sections) >= {'rtc', 'tdmpc2', 'reach', 'prompt'}\n"
        "if 'torch' in sys.modules:\n"
        "    sys.exit('validating the families sections loads torch')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
