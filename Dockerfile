# ratelimitd in a container: built on Debian 12 (bookworm) with the -dev packages, run on
# Debian 12 slim with only the runtime libraries, as the user ratelimitd. It listens on
# 0.0.0.0:8080 (config/container.json, the default configuration otherwise); quotas and
# snapshots go to the volume /var/lib/ratelimitd, and a configuration of your own goes in the
# volume /etc/ratelimitd:
#
#   docker build -t ratelimitd .
#   docker run -p 8080:8080 ratelimitd
#   docker run -p 8080:8080 -v $PWD/my-config:/etc/ratelimitd ratelimitd \
#       --config /etc/ratelimitd/my.json
#
# docker-compose.yml runs it with Redis. `make container-test` builds this file for real with
# buildah (no Docker daemon needed) and runs the image.

FROM debian:bookworm AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        gcc make pkg-config libc6-dev libjansson-dev libmicrohttpd-dev libhiredis-dev \
        libprotobuf-c-dev protobuf-c-compiler libnghttp2-dev libyaml-dev libgnutls28-dev \
        libcurl4-openssl-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Makefile ./
COPY api api
COPY include include
COPY service service
COPY config config
COPY tests/plugins tests/plugins
COPY tools/replay tools/replay
COPY tools/fast_path.awk tools/fast_path.awk
# only the programs: the tests need Redis, nginx and the test libraries, and run in CI
RUN make build-all

FROM debian:bookworm-slim
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        libjansson4 libmicrohttpd12 libhiredis0.14 libprotobuf-c1 libnghttp2-14 libyaml-0-2 libgnutls30 \
        tzdata ca-certificates libcurl4 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --user-group --uid 10001 --home-dir /var/lib/ratelimitd --create-home \
        --shell /usr/sbin/nologin ratelimitd
COPY --from=build /src/build/ratelimitd /src/build/ratelimit-replay /usr/local/bin/
COPY --from=build /src/config /etc/ratelimitd
COPY --from=build /src/include /usr/local/include
USER ratelimitd
WORKDIR /var/lib/ratelimitd
VOLUME ["/etc/ratelimitd", "/var/lib/ratelimitd"]
EXPOSE 8080
STOPSIGNAL SIGTERM
# ready when /healthz answers {"status":"ok"} (bash's /dev/tcp: the image has no curl)
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080 && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && grep -q '\"status\":\"ok\"' <&3"]
ENTRYPOINT ["/usr/local/bin/ratelimitd"]
CMD ["--config", "/etc/ratelimitd/container.json"]
