# llamadock: the model runner (port 12434) and the album service (port 8080) on Bun, with
# llama.cpp's llama-server as the inference sidecar, compiled here from the same llama.cpp source
# that a host's `npm run sidecar:build` compiles (sidecar/build-llama-server.sh).
#
#   docker build -t llamadock:cpu .
#   podman build --format docker -t llamadock:cpu .        # npm run image:build does this here
#   docker build -t llamadock:cuda \
#     --build-arg LLAMA_BUILD_IMAGE=nvidia/cuda:12.6.3-devel-ubuntu22.04 .
#
# With a CUDA development image as LLAMA_BUILD_IMAGE, llama-server is built with CUDA, and the
# CUDA libraries it links (cudart, cuBLAS) are copied beside it; the driver's libcuda comes from the
# host (NVIDIA Container Toolkit). That image's C library must not be newer than BASE_IMAGE's
# (Ubuntu 22.04's is older than Debian 12's; for a newer one, give a BASE_IMAGE as new).
#
# Stages, so that a change to src/ or to the dependencies never rebuilds llama.cpp:
#   node                  Node and npm from the npm registry (for `npm pack` and `npm ci`), nothing else
#   llama-server-compile  the build script alone, compiling llama.cpp
#   llama-server-build    its output (the folder the script prints). A build context of that name
#                         replaces it, and the compilation with it: --build-context
#                         llama-server-build=<folder> takes a build the same script made outside,
#                         as `npm run image:build` does when this host has one
#   llama-server-pack     what packing it takes: strip, and the libraries it loads (libgomp)
#   llama-server          llama-server and the shared libraries it needs, from that build
#   bun                   Bun's binary for this platform from the npm registry
#   deps                  production dependencies, exactly as package-lock.json locks them
#   (final)               BASE_IMAGE + those, the project's code last
#
# HTTPS in the build uses the CA bundle at /etc/ssl/certs/ca-certificates.crt: Debian's, installed
# by a stage, or one mounted there read-only (podman build --volume /etc/ssl/certs:/etc/ssl/certs:ro,
# for a TLS proxy the host trusts); a mounted one is never part of a layer.

ARG BASE_IMAGE=debian:bookworm-slim
ARG LLAMA_BUILD_IMAGE=debian:bookworm-slim
# Keep in step with package.json (devDependencies node and bun); a test checks.
ARG NODE_VERSION=22.23.3
ARG NPM_VERSION=11.19.1
ARG BUN_VERSION=1.4.5

FROM ${BASE_IMAGE} AS node
ARG NODE_VERSION
ARG NPM_VERSION
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends curl \
      $([ -s /etc/ssl/certs/ca-certificates.crt ] || echo ca-certificates) \
 && rm -rf /var/lib/apt/lists/*
# Node's binary (the npm package node-linux-<arch>, as package.json's `node` installs it) and npm.
RUN arch="$(uname -m | sed 's/x86_64/x64/; s/aarch64/arm64/')" \
 && mkdir -p /opt/node/lib/node_modules/npm \
 && curl -fsSL "https://registry.npmjs.org/node-linux-$arch/-/node-linux-$arch-$NODE_VERSION.tgz" \
    | tar -xz -C /opt/node --strip-components=1 package/bin/node \
 && curl -fsSL "https://registry.npmjs.org/npm/-/npm-$NPM_VERSION.tgz" \
    | tar -xz -C /opt/node/lib/node_modules/npm --strip-components=1 \
 && ln -s ../lib/node_modules/npm/bin/npm-cli.js /opt/node/bin/npm
ENV PATH=/opt/node/bin:$PATH \
    NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt \
    npm_config_update_notifier=false \
    npm_config_fund=false \
    npm_config_audit=false

FROM ${LLAMA_BUILD_IMAGE} AS llama-server-compile
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends git cmake g++ make \
      $([ -s /etc/ssl/certs/ca-certificates.crt ] || echo ca-certificates) \
 && rm -rf /var/lib/apt/lists/*
COPY --from=node /opt/node /opt/node
ENV PATH=/opt/node/bin:$PATH NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
COPY sidecar/build-llama-server.sh /build/
RUN dir="$(LLAMADOCK_CACHE=/build/cache bash /build/build-llama-server.sh)" \
 && mkdir /out \
 && cp -a "$dir"/. /out/ \
 && rm -rf /build

# What sidecar/build-llama-server.sh builds: the folder it prints. Compiled above, unless given as a
# build context of this name (a context replaces the stage it names): a build made beforehand by
# that script, for the CPU, on a system whose C library is not newer than this image's.
FROM scratch AS llama-server-build
COPY --from=llama-server-compile /out /

# /opt/llama-server: llama-server, the libraries built with it (found through its RUNPATH $ORIGIN),
# and every other library it loads that a plain Debian lacks (libgomp; with CUDA, cudart and
# cuBLAS), stripped, then run once. The C and C++ runtimes come from the final image.
FROM ${LLAMA_BUILD_IMAGE} AS llama-server-pack
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends binutils libgomp1 \
 && rm -rf /var/lib/apt/lists/*

FROM llama-server-pack AS llama-server
COPY --from=llama-server-build / /build/
RUN mkdir -p /opt/llama-server \
 && cp -a /build/llama-server /build/*.so* /opt/llama-server/ \
 && ldd /opt/llama-server/llama-server | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' \
    | while read -r lib; do \
        name="$(basename "$lib")"; \
        case "$name" in \
          libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;; \
          *) [ -e "/opt/llama-server/$name" ] || cp -L "$lib" /opt/llama-server/ ;; \
        esac; \
      done \
 && find /opt/llama-server -type f -exec strip --strip-unneeded {} + \
 && rm -rf /build \
 && LD_LIBRARY_PATH=/opt/llama-server /opt/llama-server/llama-server --version

FROM node AS bun
ARG BUN_VERSION
# Bun's own binary, from the platform package that the npm package `bun` installs.
RUN arch="$(uname -m | sed 's/x86_64/x64/')" \
 && cd /tmp \
 && npm pack --silent "@oven/bun-linux-$arch@$BUN_VERSION" >/dev/null \
 && tar -xzf oven-bun-linux-*.tgz package/bin/bun \
 && install -m 755 package/bin/bun /usr/local/bin/bun \
 && rm -rf /tmp/*

FROM node AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# Plain JavaScript, no native modules; no install scripts run.
RUN npm ci --omit=dev --ignore-scripts

FROM ${BASE_IMAGE}
# A numeric user and group (Kubernetes' runAsNonRoot can verify a numeric USER, not a name),
# written directly so that any base image will do. /models is the store (a volume); the server's
# socket, its runners' sockets and logs are under /tmp, the one tmpfs a read-only root needs
# (podman run --read-only mounts it; docker run --read-only --tmpfs /tmp).
RUN echo 'llamadock:x:10001:10001:llamadock:/home/llamadock:/usr/sbin/nologin' >>/etc/passwd \
 && echo 'llamadock:x:10001:' >>/etc/group \
 && mkdir -p /home/llamadock /models \
 && chown 10001:10001 /home/llamadock /models \
 && ln -s /srv/llamadock/bin/llamadock /usr/local/bin/llamadock \
 && command -v setpriv >/dev/null
COPY --from=llama-server /opt/llama-server /opt/llama-server
COPY --from=bun /usr/local/bin/bun /usr/local/bin/bun
COPY deploy/image/entrypoint.sh /usr/local/bin/llamadock-entrypoint
WORKDIR /srv/llamadock
COPY --from=deps /app/node_modules ./node_modules
COPY package.json tsconfig.json ./
# The project's `llamadock` command, linked from /usr/local/bin/llamadock (the Kubernetes init
# container calls it); setpriv (util-linux, in every Debian) starts each llama-server with a
# parent-death signal, so none outlives the server.
COPY bin ./bin
COPY sidecar ./sidecar
COPY src ./src

# NVIDIA_*: the GPUs, where the NVIDIA Container Toolkit is present (a CPU build has no use for them).
# No transpiler cache: the root file system may be read-only. MIMALLOC_PURGE_DELAY: Bun's allocator
# keeps freed pages for reuse (src/runtime/bun-allocator.ts).
ENV LLAMA_SERVER_PATH=/opt/llama-server/llama-server \
    MODELS_PATH=/models \
    INFERENCE_SETTINGS_PATH=/models/engine-settings.json \
    INFERENCE_RUNTIME_DIR=/tmp/llamadock/run \
    INFERENCE_LOG_DIR=/tmp/llamadock/logs \
    RUNNER_HOST=0.0.0.0 \
    RUNNER_SOCKET=/tmp/llamadock/model-runner.sock \
    ALBUM_HOST=0.0.0.0 \
    SERVICES=album,runner \
    HOME=/home/llamadock \
    BUN_RUNTIME_TRANSPILER_CACHE_PATH=0 \
    MIMALLOC_PURGE_DELAY=-1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility

VOLUME ["/models"]
EXPOSE 12434 8080
USER 10001:10001
# /livez needs no API key (HEALTH_PATHS_OPEN); /readyz would also wait for PINNED_MODELS.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["bun", "-e", "fetch('http://127.0.0.1:' + (process.env.RUNNER_PORT || 12434) + '/livez').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# Generates an API key into the models volume when none is given (see deploy/image/entrypoint.sh).
ENTRYPOINT ["/usr/local/bin/llamadock-entrypoint"]
CMD ["bun", "run", "src/index.ts"]
