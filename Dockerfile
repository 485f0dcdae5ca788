# Tempo on a CUDA machine: docker build -t tempo . && see the README for `docker run`.
#
# The base has no CUDA of its own, on purpose: PyPI's Linux torch wheel brings its CUDA runtime,
# cuBLAS and cuDNN as pip packages (nvidia-*), and a CUDA base image would only add a second,
# possibly different, CUDA beside them. The host needs the NVIDIA driver and the NVIDIA Container
# Toolkit (`--gpus all`); the driver must be new enough for the CUDA that torch was built with:
# `docker run --rm --entrypoint python3 tempo -c "import torch; print(torch.version.cuda)"`.
FROM ubuntu:24.04

# build-essential and python3-dev: Triton compiles a small C launcher per kernel on first use, so
# the graph and compiled tiers need a C compiler and Python's headers at run time.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        python3 python3-venv python3-pip python3-dev build-essential ca-certificates \
    && rm -rf /var/lib/apt/lists/*

RUN python3 -m venv /opt/tempo
ENV PATH=/opt/tempo/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility

WORKDIR /src
# Dependencies first, from pyproject.toml alone, in their own layer: editing Tempo's sources
# does not reinstall torch. torch is pinned to the version CI tests (.ci/run); the other
# requirements are pyproject's (the base and the serve extra).
COPY pyproject.toml ./
# hadolint ignore=DL3013
RUN python3 -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['dependencies'] + p['optional-dependencies']['serve']))" > /tmp/requirements.txt \
    && pip install torch==2.13.0 -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# Then Tempo itself, without touching the dependencies installed above.
COPY README.md ./
COPY controller ./controller
COPY policies ./policies
COPY config ./config
RUN pip install --no-deps .

# The daemon runs as its own user. Compile caches (runner.cache_dir: $XDG_CACHE_HOME/tempo/compile)
# and the demo's checkpoint live under XDG_CACHE_HOME; mount a volume there to keep restarts
# warm. A config file that sets runner.cache_dir explicitly must point it under this volume too.
ENV XDG_CACHE_HOME=/var/cache/tempo
RUN useradd --system --uid 10001 --create-home --home-dir /home/tempo --shell /usr/sbin/nologin \
        tempo \
    && mkdir -p /var/cache/tempo \
    && chown tempo:tempo /var/cache/tempo
VOLUME /var/cache/tempo
# By number, so that the runtime need not resolve the name (user `tempo` in the image).
USER 10001

# Healthy once the daemon answers `tempo status` on its default status socket
# (server.status_bind, tcp://127.0.0.1:5556). It answers only once the policy is loaded and
# checked, so a cold start (compiling, up to supervision.start_timeout_s) is its start period.
# A config that moves server.status_bind needs `--health-cmd "tempo status --connect ..."`.
HEALTHCHECK --interval=30s --timeout=10s --start-period=900s --retries=3 \
    CMD ["sh", "-c", "tempo status --timeout 5 > /dev/null || exit 1"]

ENTRYPOINT ["tempo"]
CMD ["serve"]
