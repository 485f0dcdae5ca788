# Tempo on a CUDA machine: docker build -t tempo . && see the README for `docker run`.
FROM nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04

RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-pip \
    && rm -rf /var/lib/apt/lists/*

RUN python3 -m venv /opt/tempo
ENV PATH=/opt/tempo/bin:$PATH

WORKDIR /src
COPY pyproject.toml README.md ./
COPY controller ./controller
COPY policies ./policies
COPY config ./config
# The daemon's extra. PyPI's Linux torch wheel is a CUDA build, which is what this image wants.
RUN pip install --no-cache-dir '.[serve]'

# Compile caches and demo checkpoints live here; mount a volume to keep restarts warm.
ENV XDG_CACHE_HOME=/var/cache/tempo
VOLUME /var/cache/tempo

ENTRYPOINT ["tempo"]
CMD ["serve", "--config", "/src/config/default.yaml"]
