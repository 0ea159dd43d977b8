# llamadock: the model runner (port 12434) and the album service (port 8080) on Bun, with
# llama.cpp's llama-server as the inference sidecar.
#
#   docker build -t llamadock .                                   # CUDA (needs the NVIDIA runtime)
#   docker build -t llamadock:cpu --build-arg LLAMA_CPP_VARIANT=server .
#
# The final image is the official llama.cpp server image itself, so llama-server runs next to
# exactly the libraries it was built with (CUDA runtime, cuBLAS, libgomp); Bun and our code are
# copied in. LLAMA_CPP_RELEASE must match sidecar/binary.ts (LLAMA_CPP_RELEASE).

ARG LLAMA_CPP_RELEASE=v0.5.0
ARG LLAMA_CPP_VARIANT=server-cuda
ARG BUN_VERSION=1.4.5
ARG NODE_VERSION=22

# Production dependencies (plain JavaScript, no native modules), pinned by the lockfile. `npm install`
# rather than `npm ci`: the lockfile lists only the platform packages of the dev runtimes (bun, deno)
# that the registry it was made against serves, and `npm ci` refuses a lockfile it would extend.
FROM node:${NODE_VERSION}-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm install --omit=dev --ignore-scripts --no-audit --no-fund

FROM oven/bun:${BUN_VERSION}-debian AS bun

FROM ghcr.io/ggml-org/llama.cpp:${LLAMA_CPP_VARIANT}-${LLAMA_CPP_RELEASE}
# setpriv (util-linux) starts each llama-server with a parent-death signal: no orphans.
RUN command -v setpriv >/dev/null \
 || (apt-get update && apt-get install -y --no-install-recommends util-linux && rm -rf /var/lib/apt/lists/*)
COPY --from=bun /usr/local/bin/bun /usr/local/bin/bun
RUN groupadd --system --gid 10001 llamadock \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/llamadock --create-home llamadock \
 && mkdir -p /models /run/llamadock /var/log/llamadock \
 && chown llamadock:llamadock /models /run/llamadock /var/log/llamadock

WORKDIR /srv/llamadock
COPY --from=deps /app/node_modules ./node_modules
COPY package.json tsconfig.json ./
COPY src ./src
COPY sidecar ./sidecar
# The `llamadock` command (pull, serve...) on PATH, as the Kubernetes init container calls it.
RUN printf '#!/bin/sh\nexec bun /srv/llamadock/src/cli/main.ts "$@"\n' > /usr/local/bin/llamadock \
 && chmod 755 /usr/local/bin/llamadock

# The base image keeps llama-server and its shared libraries in /app.
ENV LLAMA_SERVER_PATH=/app/llama-server \
    MODELS_PATH=/models \
    INFERENCE_RUNTIME_DIR=/run/llamadock \
    INFERENCE_LOG_DIR=/var/log/llamadock \
    RUNNER_HOST=0.0.0.0 \
    RUNNER_SOCKET=/run/llamadock/model-runner.sock \
    ALBUM_HOST=0.0.0.0 \
    SERVICES=album,runner

VOLUME ["/models"]
EXPOSE 12434 8080
# Numeric, so that Kubernetes' runAsNonRoot can check it is not root (it refuses a USER given by name).
USER 10001:10001
# curl ships in the llama.cpp server images (their own HEALTHCHECK uses it).
# /livez needs no API key (HEALTH_PATHS_OPEN); /readyz would also wait for PINNED_MODELS.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD curl -fsS http://127.0.0.1:12434/livez >/dev/null || exit 1
# The base image's ENTRYPOINT is llama-server: replace it.
ENTRYPOINT []
CMD ["bun", "run", "src/index.ts"]
