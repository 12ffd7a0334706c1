# syntax=docker/dockerfile:1
# The goodput image: the operator, and what its Jobs and simulated engines run. Every
# container the operator creates sets only `args` (`loadgen ...`, `serve-sim ...`), so the
# entrypoint is the binary itself. The build needs only the Rust toolchain's registry
# (crates.io). The run stage is Debian slim with `git` and `ssh` (a ServingPlan's
# spec.gitops pushes its proposal with the git command line) and nothing else, as the
# non-root user 65532 that the chart and the operator's pods run as.
#
#   docker build -t goodput:dev .

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# The registry and target caches speed up rebuilds; the binary is copied out of the cache.
# Stripped: symbols and line tables are for local profiling, not for the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --release --locked --bin goodput \
    && cp target/release/goodput /goodput

FROM debian:12.12-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends git openssh-client ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 65532 --user-group --no-create-home --home-dir /nonexistent nonroot
COPY --from=build /goodput /goodput
USER 65532:65532
ENTRYPOINT ["/goodput"]
