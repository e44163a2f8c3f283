# Makes a TCP server of this namespace reachable from inside another network
# namespace, without any interface between them: listens on 127.0.0.1:PORT
# in namespace NS (a socket keeps the namespace it was made in) and relays
# every connection to HOST:TARGET_PORT here. Bytes are relayed as they are,
# so TLS passes through untouched. Tests use it to let a process in a node
# namespace reach an API server running in the test process, or (TARGET_NS)
# the real kube-apiserver running in a namespace of its own; NS "-" listens
# here (the test process reaching that kube-apiserver).
#
#   python3 ns_forward.py NS PORT HOST TARGET_PORT [TARGET_NS]   (prints "ready")
#
# When the target refuses, the inner connection is closed at once (what a
# client sees of an API server that is down).
import ctypes
import os
import socket
import sys
import threading

ns, port, host, target_port = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
target_ns = sys.argv[5] if len(sys.argv) > 5 else None
CLONE_NEWNET = 0x40000000
libc = ctypes.CDLL(None, use_errno=True)
# Ends with the test process that started it, however that one ends (PR_SET_PDEATHSIG, SIGKILL):
# a forward left behind holds a port and a namespace.
libc.prctl(1, 9)
if os.getppid() == 1:
    sys.exit(0)


def setns(fd):
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


# setns changes the calling thread only: done before any other thread starts.
home = os.open("/proc/self/ns/net", os.O_RDONLY)
inner = os.open(f"/run/netns/{ns}", os.O_RDONLY) if ns != "-" else home
setns(inner)
listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(64)
port = listener.getsockname()[1]  # PORT 0: the kernel's pick, printed with "ready"
setns(home)
if inner != home:
    os.close(inner)
# kept open: each relay thread enters it (setns is per thread) before it connects
outer = os.open(f"/run/netns/{target_ns}", os.O_RDONLY) if target_ns else None


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
        if outer is not None:
            setns(outer)
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


print(f"ready {port}", flush=True)
while True:
    conn, _ = listener.accept()
    threading.Thread(target=relay, args=(conn,), daemon=True).start()
