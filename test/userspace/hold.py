# Long-lived TCP connections for the userspace relay tests.
#
#   python3 hold.py serve NAME PORT    a pod's server: greets "NAME SRC\n", then
#                                      answers each line L with "NAME L\n"; prints "ready"
#   python3 hold.py client             reads JSON commands on stdin, one result line each:
#     {"op": "open", "id": 1, "ip": "198.18.0.10", "port": 80}  -> {"id": 1, "ok": true, "answer": "pod0 203.0.113.10"}
#     {"op": "ping", "id": 1}                                    -> {"id": 1, "ok": true, "answer": "pod0 ping"}
#                                                                   | {"id": 1, "ok": false, "error": "closed" | "reset" | "timeout"}
import json
import socket
import sys
import threading


def serve(name, port):
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::", port))
    s.listen(128)
    print("ready", flush=True)

    def talk(c, addr):
        host = addr[0][7:] if addr[0].startswith("::ffff:") else addr[0]
        try:
            c.sendall(f"{name} {host}\n".encode())
            f = c.makefile("rb")
            for line in f:
                c.sendall(f"{name} {line.decode().strip()}\n".encode())
        except OSError:
            pass
        finally:
            c.close()

    while True:
        c, addr = s.accept()
        threading.Thread(target=talk, args=(c, addr), daemon=True).start()


def read_line(sock):
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(1024)
        if not chunk:
            raise EOFError()
        data += chunk
    return data.decode().strip()


def client():
    socks = {}
    for line in sys.stdin:
        cmd = json.loads(line)
        out = {"id": cmd["id"]}
        try:
            if cmd["op"] == "open":
                fam = socket.AF_INET6 if ":" in cmd["ip"] else socket.AF_INET
                s = socket.socket(fam, socket.SOCK_STREAM)
                s.settimeout(cmd.get("timeout", 3))
                s.connect((cmd["ip"], cmd["port"]))
                socks[cmd["id"]] = s
                out.update(ok=True, answer=read_line(s))
            else:
                s = socks[cmd["id"]]
                s.sendall(b"ping\n")
                out.update(ok=True, answer=read_line(s))
        except EOFError:
            out.update(ok=False, error="closed")
        except ConnectionResetError:
            out.update(ok=False, error="reset")
        except (socket.timeout, TimeoutError):
            out.update(ok=False, error="timeout")
        except OSError as e:
            out.update(ok=False, error="refused" if isinstance(e, ConnectionRefusedError) else f"error {e}")
        print(json.dumps(out), flush=True)


if sys.argv[1] == "serve":
    serve(sys.argv[2], int(sys.argv[3]))
else:
    client()
