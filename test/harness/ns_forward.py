# Makes a TCP server of this namespace reachable from inside another network
# namespace, without any interface between them: listens on 127.0.0.1:PORT
# in namespace NS (a socket keeps the namespace it was made in) and relays
# every connection to HOST:TARGET_PORT here. Bytes are relayed as they are,
# so TLS passes through untouched. Tests use it to let a process in a node
# namespace reach an API server running in the test process.
#
#   python3 ns_forward.py NS PORT HOST TARGET_PORT     (prints "ready")
#
# When the target refuses, the inner connection is closed at once (what a
# client sees of an API server that is down).
import ctypes
import os
import socket
import sys
import threading

ns, port, host, target_port = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
CLONE_NEWNET = 0x40000000
libc = ctypes.CDLL(None, use_errno=True)


def setns(fd):
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


# setns changes the calling thread only: done before any other thread starts.
home = os.open("/proc/self/ns/net", os.O_RDONLY)
inner = os.open(f"/run/netns/{ns}", os.O_RDONLY)
setns(inner)
listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(64)
setns(home)
os.close(inner)
os.close(home)


def pump(src, dst):
    """copies one direction; an end is passed on as an end, an error ends both directions"""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def relay(client):
    try:
        upstream = socket.create_connection((host, target_port), timeout=2)
        upstream.settimeout(None)
    except OSError:
        client.close()
        return
    threads = [threading.Thread(target=pump, args=(a, b), daemon=True) for a, b in ((client, upstream), (upstream, client))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    client.close()
    upstream.close()


print("ready", flush=True)
while True:
    conn, _ = listener.accept()
    threading.Thread(target=relay, args=(conn,), daemon=True).start()
