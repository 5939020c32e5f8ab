# syntax=docker/dockerfile:1
#
# bk in a small image that runs as a non-root user:
#
#   docker build -t bookie-go --build-arg VERSION=$(git describe --always --dirty) .
#   docker run --rm bookie-go version
#
# The default command runs one bookie on /data; packaging/compose.yaml runs
# etcd and three of them. A bookie in a container must be told the address
# clients dial (--advertise): the bookie id is that address.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/bk ./cmd/bk \
 && mkdir -p /out/data

# distroless/static: CA certificates and tzdata, no shell; uid/gid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/bk /usr/local/bin/bk
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
VOLUME /data
# protocol, admin HTTP (/metrics, /healthz, /readyz, /info)
EXPOSE 3181 8181
ENTRYPOINT ["/usr/local/bin/bk"]
CMD ["bookie", "--data", "/data", "--listen", "0.0.0.0:3181", "--admin", "0.0.0.0:8181"]
