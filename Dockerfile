# syntax=docker/dockerfile:1
#
# outboxd (the default, final stage) and the compose stack's sample app (--target shopapp), both
# static binaries on distroless, running as the non-root user "nonroot" (65532).
#
#   docker build -t outboxd --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg COMMIT=$(git rev-parse HEAD) .
#
# .git stays out of the build context (.dockerignore), so the go command cannot record the commit
# itself: COMMIT is what outboxd version and outboxd_build_info report (empty when not given).
#   docker build -t outboxd-shopapp --target shopapp .

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS deps
WORKDIR /src
ENV CGO_ENABLED=0
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .

FROM deps AS build-outboxd
ARG VERSION=dev
ARG COMMIT=
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /out/outboxd ./cmd/outboxd \
 && mkdir -p /out/var/lib/outboxd

FROM deps AS build-shopapp
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags "-s -w" -o /out/shopapp ./cmd/shopapp

FROM gcr.io/distroless/static-debian12:nonroot AS shopapp
COPY --from=build-shopapp /out/shopapp /usr/local/bin/shopapp
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/shopapp"]

# The final stage is the default target: outboxd.
FROM gcr.io/distroless/static-debian12:nonroot AS outboxd
COPY --from=build-outboxd /out/outboxd /usr/local/bin/outboxd
# The checkpoint directory, owned by nonroot: a named volume mounted here starts as a copy of
# it, so outboxd can write its checkpoint and lock file there.
COPY --from=build-outboxd --chown=65532:65532 /out/var/lib/outboxd /var/lib/outboxd
USER nonroot:nonroot
# 9120: the admin server (metrics, health) when admin.listen is set.
EXPOSE 9120
ENTRYPOINT ["/usr/local/bin/outboxd"]
CMD ["run", "--config", "/etc/outboxd/outboxd.yaml"]
