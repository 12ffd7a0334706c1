# syntax=docker/dockerfile:1
# The goodput image: the operator, and what its Jobs and simulated engines run. Every
# container the operator creates sets only `args` (`loadgen ...`, `serve-sim ...`), so the
# entrypoint is the binary itself.
#
#   docker build -t goodput:dev .

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# The registry and target caches speed up rebuilds; the binary is copied out of the cache.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin goodput \
    && cp target/release/goodput /goodput

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /goodput /goodput
ENTRYPOINT ["/goodput"]
