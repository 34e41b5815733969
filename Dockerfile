# inboxd container image.
#
# The build stage runs what a developer runs (see README.md, "Building by
# hand"), limited to what building needs: scripts/install-deps --build-only
# (no PostgreSQL, Go or Node), then the CMake configure and the build of the
# two binaries. The runtime stage holds only inboxd and inboxctl, the shared
# libraries they load and the ODBC drivers Debian ships, each registered in
# /etc/odbcinst.ini under the name a connection string uses: FreeTDS
# ("FreeTDS", for SQL Server, always), psqlODBC ("PostgreSQL Unicode") and
# SQLite ("SQLite3").
#
#   docker build -t inboxd .
#
# scripts/image-check builds it for real (buildah, no daemon) and runs the
# image's inboxd against the bundled Service Bus emulator.
#
# Microsoft's "ODBC Driver 18 for SQL Server" is not in Debian. Build with
#
#   docker build --build-arg MSODBCSQL18=1 -t inboxd:mssql .
#
# to add it from Microsoft's Debian 12 repository. Doing so accepts
# Microsoft's license for that driver (ACCEPT_EULA=Y). MSODBC_REPO and
# MSODBC_KEY override where it comes from (for a mirror).
#
# The image runs as the numeric user 10001 with ENTRYPOINT ["inboxd"]; pass
# the config path as arguments (the Helm chart passes
# "--config /etc/inboxd/inboxd.json") and the connection strings as
# INBOXD_SERVICEBUS_CONNECTION_STRING and INBOXD_DB_CONNECTION_STRING.

FROM debian:12 AS build
WORKDIR /src
# Dependencies first, so their layer is reused while only sources change.
COPY scripts/install-deps scripts/install-deps
RUN scripts/install-deps --build-only
COPY . .
RUN cmake -S . -B build && cmake --build build -j"$(nproc)" --target inboxd inboxctl

FROM debian:12-slim AS runtime
ARG MSODBCSQL18=0
ARG MSODBC_REPO=https://packages.microsoft.com/debian/12/prod
ARG MSODBC_KEY=https://packages.microsoft.com/keys/microsoft.asc
RUN set -eux; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ca-certificates libqpid-proton11 libjansson4 libcurl4 libssl3 \
        unixodbc odbcinst odbc-postgresql libsqliteodbc tdsodbc; \
    if [ "$MSODBCSQL18" = 1 ]; then \
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends curl gpg; \
        curl -fsSL "$MSODBC_KEY" | gpg --dearmor -o /usr/share/keyrings/microsoft-prod.gpg; \
        echo "deb [arch=amd64,arm64 signed-by=/usr/share/keyrings/microsoft-prod.gpg] $MSODBC_REPO bookworm main" \
            > /etc/apt/sources.list.d/microsoft-prod.list; \
        apt-get update; \
        ACCEPT_EULA=Y DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends msodbcsql18; \
        apt-get purge -y --auto-remove curl gpg; \
    fi; \
    rm -rf /var/lib/apt/lists/*; \
    for d in FreeTDS "PostgreSQL Unicode" SQLite3; do odbcinst -q -d -n "$d" >/dev/null; done; \
    odbcinst -q -d; \
    groupadd --system --gid 10001 inboxd; \
    useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin inboxd
COPY --from=build /src/build/inboxd /src/build/inboxctl /usr/local/bin/
# Fails the image build when a runtime library is missing.
RUN ! ldd /usr/local/bin/inboxd /usr/local/bin/inboxctl | grep "not found" && inboxd --version
USER 10001:10001
EXPOSE 9090
ENTRYPOINT ["inboxd"]
