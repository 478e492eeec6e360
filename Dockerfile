# delaywheel on an empty image. Build the static binary first, then the image:
#   CGO_ENABLED=0 go build -trimpath -o delaywheel ./cmd/delaywheel
#   docker build -t delaywheel .
FROM scratch
COPY delaywheel /delaywheel
EXPOSE 7070 7071 7072
VOLUME ["/data"]
ENTRYPOINT ["/delaywheel"]
CMD ["server", "--data-dir", "/data", "--http-addr", "0.0.0.0:7070", "--grpc-addr", "0.0.0.0:7072", "--raft-addr", "127.0.0.1:7071"]
