"""A pi0 checkpoint overwritten in place while its policy is served: what serving reads of it
must be memory the process owns. The safetensors file is mapped, and the token table (read for
every new prompt) was kept as a mapped tensor: embedding a prompt after the overwrite killed the
process with SIGBUS. Run in a child process, so that a SIGBUS fails the test, not pytest."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from policies.pi0.demo import write_demo_checkpoint

CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    from policies.pi0.policy import read_pi0_policy

    directory = Path(sys.argv[1])
    embedder = read_pi0_policy(directory, None).policy.codec.embedder  # the served prompts'
    ids = list(range(embedder.vocab_size))
    before = embedder.embed(ids)
    with open(directory / "model.safetensors", "wb") as file:  # as a trainer's save would
        file.write(b"not a checkpoint any more")
    print("unchanged" if (embedder.embed(ids) == before).all() else "changed")
    """
)


def test_prompts_are_embedded_after_the_file_is_overwritten(tmp_path: Path) -> None:
    directory = write_demo_checkpoint(tmp_path / "pi0", "pi0")
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr[-2000:]}"
    assert result.stdout.strip() == "unchanged"
