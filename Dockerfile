# faultline's image: a Debian build stage with the Hyperscan headers, then a slim Debian runtime
# with only the shared libraries the binary links. `docker compose up --build` uses it.
#
#   docker build -t faultline .
#   docker run --rm faultline scan --help

# Build stage. The toolchain must satisfy the dependencies' MSRV (tonic: 1.88).
FROM rust:1.90-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libhyperscan-dev pkg-config libssl-dev zlib1g-dev libzstd-dev cmake \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked \
 && install -D target/release/faultline /out/faultline

# Runtime stage: the same Debian release, runtime libraries only.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libhyperscan5 libssl3 zlib1g libzstd1 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/faultline /usr/local/bin/faultline
# The KB is built into the binary; mount a directory and set FAULTLINE_KB to use another.
USER 65532:65532
EXPOSE 9477
ENTRYPOINT ["faultline"]
CMD ["run"]
