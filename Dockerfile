# ratelimitd in a container: built on Debian 12, run on Debian 12 slim with only the runtime
# libraries. Listens on 0.0.0.0:8080 with the built-in default configuration unless a
# configuration is mounted and named:
#
#   docker build -t ratelimitd .
#   docker run -p 8080:8080 ratelimitd
#   docker run -p 8080:8080 -v $PWD/config:/etc/ratelimitd ratelimitd \
#       --config /etc/ratelimitd/default.json
#
# Quotas and snapshots go to /var/lib/ratelimitd (a volume) when the configuration names files
# there; the default configuration's relative paths resolve under it (the working directory).

FROM debian:12 AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        gcc make pkg-config libc6-dev libjansson-dev libmicrohttpd-dev libhiredis-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Makefile ./
COPY include include
COPY service service
COPY config config
COPY tests/plugins tests/plugins
# only the daemon: the tests need a Redis and the test libraries, and run in CI
RUN make build-all

FROM debian:12-slim
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        libjansson4 libmicrohttpd12 libhiredis0.14 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home-dir /var/lib/ratelimitd --create-home ratelimitd
COPY --from=build /src/build/ratelimitd /usr/local/bin/ratelimitd
COPY --from=build /src/config /etc/ratelimitd
COPY --from=build /src/include /usr/local/include
USER ratelimitd
WORKDIR /var/lib/ratelimitd
VOLUME /var/lib/ratelimitd
EXPOSE 8080
STOPSIGNAL SIGTERM
# the built-in default listens on 127.0.0.1; a container must listen on every interface
ENTRYPOINT ["/usr/local/bin/ratelimitd"]
CMD ["--config", "/etc/ratelimitd/container.json"]
