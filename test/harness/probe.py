# The client side of namespace tests: reads a JSON array of probes on stdin,
#   [{"ip": "198.18.0.1", "port": 80, "proto": "tcp", "timeout": 1.0, "sport": 0, "src": ""}]
# runs them one after another, and prints a JSON array of results:
#   {"ok": true,  "who": "pod1", "source": "198.18.128.1", "ms": 0.4, "connectMs": 0.2}
#   {"ok": false, "error": "refused" | "timeout" | "unreachable" | "error", "detail": "...", "ms": ...}
# proto "http" sends `GET path` (default /) and answers with the status code
# as "who", e.g. {"ok": true, "who": "503", "source": ""}.
# "refused" = TCP RST or ICMP port-unreachable (what nft `reject` sends);
# "timeout" = nothing came back (what `drop` looks like).
import errno
import json
import os
import random
import select
import socket
import struct
import sys
import time

from sctp_wire import build_init, parse_sctp


def family(ip):
    return socket.AF_INET6 if ":" in ip else socket.AF_INET


def parse_answer(text):
    parts = text.strip().split()
    if len(parts) != 2:
        return {"ok": False, "error": "error", "detail": f"bad answer {text!r}"}
    return {"ok": True, "who": parts[0], "source": parts[1]}


def os_error(e):
    if isinstance(e, ConnectionRefusedError):
        return {"ok": False, "error": "refused", "detail": str(e)}
    if isinstance(e, (socket.timeout, TimeoutError)):
        return {"ok": False, "error": "timeout", "detail": "no answer"}
    if e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EACCES, errno.EPERM):
        return {"ok": False, "error": "unreachable", "detail": str(e)}
    return {"ok": False, "error": "error", "detail": str(e)}


def stream_probe(p, proto):
    s = socket.socket(family(p["ip"]), socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM)
    s.settimeout(p.get("timeout", 1.0))
    if p.get("sport") or p.get("src"):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((p.get("src") or "", p.get("sport") or 0))
    try:
        t0 = time.perf_counter()
        s.connect((p["ip"], p["port"]))
        connect_ms = (time.perf_counter() - t0) * 1000
        if proto == "udp":
            s.send(b"hi\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(2048)
            if not chunk:
                break
            data += chunk
        out = parse_answer(data.decode(errors="replace"))
        if proto == "tcp":
            out["connectMs"] = connect_ms
        return out
    except OSError as e:
        return os_error(e)
    finally:
        s.close()


def http_probe(p):
    try:
        with socket.create_connection((p["ip"], p["port"]), timeout=p.get("timeout", 1.0)) as s:
            s.sendall(f"GET {p.get('path', '/')} HTTP/1.0\r\nHost: {p['ip']}\r\n\r\n".encode())
            data = b""
            while b"\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        parts = data.split(b"\r\n", 1)[0].split()
        if len(parts) < 2:
            return {"ok": False, "error": "error", "detail": f"bad status line {data[:80]!r}"}
        return {"ok": True, "who": parts[1].decode(), "source": ""}
    except OSError as e:
        return os_error(e)


def icmp_verdict(fam, msg, sport, dport):
    """Maps an ICMP error about our SCTP packet to a result, or None if it is about something else."""
    if fam == socket.AF_INET:
        icmp = msg[(msg[0] & 0x0F) * 4 :]
        if len(icmp) < 8 + 20 + 4 or icmp[0] != 3:
            return None
        inner = icmp[8:]
        ihl = (inner[0] & 0x0F) * 4
        if inner[9] != 132:
            return None
        ports, refused = inner[ihl : ihl + 4], icmp[1] == 3
    else:
        if len(msg) < 8 + 40 + 4 or msg[0] != 1 or msg[8 + 6] != 132:
            return None
        ports, refused = msg[48:52], msg[1] == 4
    if struct.unpack("!HH", ports) != (sport, dport):
        return None
    return {"ok": False, "error": "refused" if refused else "unreachable", "detail": "icmp"}


def sctp_probe(p):
    fam, ip, dport = family(p["ip"]), p["ip"], p["port"]
    sport = p.get("sport") or random.randint(20000, 60000)
    tag = random.randint(1, 2**32 - 1)
    s = socket.socket(fam, socket.SOCK_RAW, 132)
    icmp = socket.socket(fam, socket.SOCK_RAW, socket.IPPROTO_ICMP if fam == socket.AF_INET else socket.IPPROTO_ICMPV6)
    try:
        s.sendto(build_init(sport, dport, tag), (ip, 0) if fam == socket.AF_INET else (ip, 0, 0, 0))
        deadline = time.monotonic() + p.get("timeout", 1.0)
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([s, icmp], [], [], left)
            for r in ready:
                data, _ = r.recvfrom(65535)
                if r is icmp:
                    verdict = icmp_verdict(fam, data, sport, dport)
                    if verdict:
                        return verdict
                    continue
                if fam == socket.AF_INET:
                    data = data[(data[0] & 0x0F) * 4 :]
                pkt = parse_sctp(data)
                if pkt and pkt["chunk"] == 2 and pkt["vtag"] == tag and pkt["dport"] == sport:
                    return parse_answer(pkt["cookie"].rstrip(b"\0").decode(errors="replace"))
        return {"ok": False, "error": "timeout", "detail": "no answer"}
    except OSError as e:
        return os_error(e)
    finally:
        s.close()
        icmp.close()


def probe(p):
    t0 = time.perf_counter()
    proto = p.get("proto", "tcp")
    r = sctp_probe(p) if proto == "sctp" else http_probe(p) if proto == "http" else stream_probe(p, proto)
    r["ms"] = (time.perf_counter() - t0) * 1000
    return r


if __name__ == "__main__":  # probe_loop.py imports probe()
    print(json.dumps([probe(p) for p in json.load(sys.stdin)]))
