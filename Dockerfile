# kpng's image: the single compiled binary plus the tools its backends run.
#
#   bun run build                # -> dist/kpng (build.ts: bun build --compile)
#   docker build -t kpng:latest .
#
# The binary links glibc (Bun's runtime), hence a Debian base rather than a
# static or musl one.
FROM debian:bookworm-slim

RUN apt-get update \
 && apt-get install -y --no-install-recommends nftables iptables ipset ipvsadm conntrack ca-certificates \
 && rm -rf /var/lib/apt/lists/*

COPY dist/kpng /usr/local/bin/kpng

# health (/healthz, /livez) and metrics; both configurable.
EXPOSE 10256 10249

ENTRYPOINT ["/usr/local/bin/kpng"]
