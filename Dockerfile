# Cachet's two images, for users with a Docker (BuildKit) engine:
#   docker build --target operator -t localhost/cachet-operator:0.1.0 .
#   docker build --target engine   -t localhost/cachetd:0.1.0 .
# (`make docker-build` runs both.) Both binaries are static so the final stages
# can be FROM scratch: nothing in the image but the program, no shell, no libc to
# patch, and it runs as the non-root 65532 that the chart's securityContext expects.
#
# Machines without a daemon or registry (CI here) build the same final stages from
# host-built static binaries with buildah: see hack/images.sh and
# hack/images/{operator,engine}.Containerfile, whose final stages must stay
# identical to the ones below (hack/images.sh refuses to build if they differ).

ARG GO_VERSION=1.26
ARG DEBIAN_VERSION=bookworm

# ---- operator: the manager binary -----------------------------------------------
FROM golang:${GO_VERSION}-${DEBIAN_VERSION} AS operator-builder
WORKDIR /workspace
# Modules first, so a source edit does not refetch them.
COPY go.mod go.sum ./
RUN go mod download
# The whole tree minus .dockerignore: main.go, api/, controllers/ and whatever
# internal packages they grow, without listing each.
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags "-s -w" -o /out/manager main.go

# ---- engine: cachetd and its probe, C with libc + pthreads only -----------------
FROM debian:${DEBIAN_VERSION}-slim AS engine-builder
RUN apt-get update && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY engine/ engine/
# A static link keeps the final stage FROM scratch; build/static keeps it apart
# from the developer's dynamic build tree.
RUN make -C engine BUILD=build/static LDFLAGS=-static all \
    && mkdir -p /out && cp engine/build/static/cachetd engine/build/static/cachet-probe /out/

# ---- final stages (keep in step with hack/images/Containerfile.prebuilt) ---------
FROM scratch AS operator
COPY --from=operator-builder /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]

FROM scratch AS engine
COPY --from=engine-builder /out/cachetd /usr/local/bin/cachetd
COPY --from=engine-builder /out/cachet-probe /usr/local/bin/cachet-probe
USER 65532:65532
EXPOSE 11211
ENTRYPOINT ["/usr/local/bin/cachetd"]
