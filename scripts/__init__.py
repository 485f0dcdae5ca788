"""Measurements and checks of Tempo, run from the repository's root as modules:

    python -m scripts.bench.bench_loop --help

Not part of the installed package (pyproject.toml's packages are controller and policies): what
ships with `tempo` is in controller/tools/. scripts.measure holds what the scripts share.
"""
