# A pod's tiny server for namespace tests: every TCP connection, UDP datagram
# and SCTP INIT is answered with "<name> <peer address>\n", so a test learns
# which endpoint answered and the source address the pod saw (preserved or
# masqueraded).
#
#   python3 echo_server.py NAME tcp:80 udp:53 sctp:9000 ...
#
# Prints "ready" once every socket is bound. TCP/UDP sockets are dual-stack.
# The test kernel has no SCTP socket support ("Protocol not supported"), so
# SCTP is spoken over raw sockets: the answer is an INIT-ACK whose state
# cookie carries the text. That is enough for netfilter (conntrack tracks the
# INIT / INIT-ACK exchange, NAT rewrites ports and the CRC32c) and for the
# probe, which never completes the association.
import os
import selectors
import socket
import struct
import sys

from sctp_wire import build_init_ack, parse_sctp

name = sys.argv[1]
specs = [a.split(":") for a in sys.argv[2:]]


def peer_text(addr):
    host = addr[0]
    return host[7:] if host.startswith("::ffff:") else host


sel = selectors.DefaultSelector()
sctp_ports = set()
for proto, port in specs:
    port = int(port)
    if proto == "sctp":
        sctp_ports.add(port)
        continue
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    s = socket.socket(socket.AF_INET6, kind)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::", port))
    if proto == "tcp":
        s.listen(128)
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ, proto)

if sctp_ports:
    for fam in (socket.AF_INET, socket.AF_INET6):
        s = socket.socket(fam, socket.SOCK_RAW, 132)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, "sctp")

print("ready", flush=True)


def answer_sctp(s):
    data, addr = s.recvfrom(65535)
    if s.family == socket.AF_INET:
        data = data[(data[0] & 0x0F) * 4 :]  # IPv4 raw sockets include the IP header
    pkt = parse_sctp(data)
    if not pkt or pkt["dport"] not in sctp_ports or pkt["chunk"] != 1:
        return
    text = f"{name} {peer_text(addr)}\n".encode()
    reply = build_init_ack(pkt, text)
    s.sendto(reply, (addr[0], 0) if s.family == socket.AF_INET else (addr[0], 0, 0, 0))


while True:
    for key, _ in sel.select():
        s, proto = key.fileobj, key.data
        try:
            if proto == "tcp":
                c, addr = s.accept()
                c.sendall(f"{name} {peer_text(addr)}\n".encode())
                c.close()
            elif proto == "udp":
                data, addr = s.recvfrom(2048)
                s.sendto(f"{name} {peer_text(addr)}\n".encode(), addr)
            else:
                answer_sctp(s)
        except OSError as e:
            print(f"error {e}", file=sys.stderr, flush=True)
