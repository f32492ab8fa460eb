# syntax=docker/dockerfile:1
#
# Berth's images, for people with Docker. BINARY picks the image: scheduler, controller or
# router. From the repository's root:
#
#   docker build --build-arg BINARY=router --build-arg VERSION=$(cat VERSION) \
#     --build-arg GIT_COMMIT=$(git rev-parse HEAD) \
#     --build-arg SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) \
#     -t ghcr.io/berth-sh/berth-router:$(cat VERSION) .
#
# It builds the file system `make images` builds without a Docker engine (hack/imagebuild):
# the Makefile's static, stamped binary at /berth, the same CA bundle, user 65532:65532, the
# same labels. UNTESTED: Berth's build machines have no Docker engine, so this file is never
# built there. `make images` is what CI builds and checks (hack/imagebuild's test: the same
# digest twice, the user, the labels, no shell, the binary's --version); that test also
# reads this file to keep its paths, user and labels in step, but cannot run it.
# Layer timestamps follow SOURCE_DATE_EPOCH only with BuildKit's
# --output type=docker,rewrite-timestamp=true (BuildKit 0.13 or later).

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS=linux
ARG TARGETARCH
ARG BINARY
ARG VERSION
ARG GIT_COMMIT=unknown
ARG SOURCE_DATE_EPOCH=0
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# The labels below need the release as a build arg; it must be the VERSION file's.
RUN case "$BINARY" in scheduler|controller|router) ;; *) echo "--build-arg BINARY=scheduler|controller|router, got '$BINARY'" >&2; exit 1;; esac; \
    test "$VERSION" = "$(cat VERSION)" || { echo "--build-arg VERSION=$(cat VERSION) (the VERSION file), got '$VERSION'" >&2; exit 1; }
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH make bin/berth-${BINARY} GIT_COMMIT=${GIT_COMMIT} SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH} && \
    mkdir /out && cp bin/berth-${BINARY} /out/berth && \
    go run ./hack/imagebuild -ca-certificates /out/ca-certificates.crt

# scratch: no shell, no package manager, no /etc/passwd (the user is numeric).
FROM scratch
ARG BINARY
ARG VERSION
ARG GIT_COMMIT=unknown
COPY --from=build /out/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/berth /berth
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
LABEL org.opencontainers.image.title=berth-${BINARY} \
      org.opencontainers.image.version=${VERSION} \
      org.opencontainers.image.revision=${GIT_COMMIT} \
      org.opencontainers.image.source=https://github.com/berth-sh/berth \
      org.opencontainers.image.licenses=Apache-2.0
USER 65532:65532
ENTRYPOINT ["/berth"]
