// The kernel's nftables change events read by kpng itself: a NETLINK_NETFILTER
// socket joined to the NFNLGRP_NFTABLES multicast group, through bun:ffi on
// libc, read without blocking on a timer. What `nft monitor` told before
// (watch.ts), without its cost: the monitor fetches the whole ruleset into
// its cache first and keeps it (memory that grows with the ruleset, whatever
// its arguments), this holds one receive buffer and parses each event as it
// comes (netlink.ts): memory O(1), CPU O(events).
//
// No worker thread and no blocking call: recv(MSG_DONTWAIT) every POLL_MS
// drains what the kernel queued (it queues each event at commit, in the
// committing process's syscall), and at once when the watch asks (poll()).
// A burst bigger than the socket's buffer (16 MB, as nft monitor asks for)
// makes recv fail with ENOBUFS: said as a lost-events line, as the monitor
// says it.

import { FFIType, dlopen, read } from "bun:ffi";
import { KpngError } from "../../src/plugins/toolkit/index.ts";
import { eventLines, parseNftEvents } from "./netlink.ts";
import type { EventHandlers, EventSource, EventStream } from "./watch.ts";

const AF_NETLINK = 16;
const SOCK_RAW = 3;
const SOCK_CLOEXEC = 0o2000000;
const NETLINK_NETFILTER = 12;
const NFNLGRP_NFTABLES = 7;
const SOL_SOCKET = 1;
const SO_RCVBUF = 8;
const SO_RCVBUFFORCE = 33;
const MSG_DONTWAIT = 0x40;
const O_RDONLY = 0;
const O_CLOEXEC = 0o2000000;
const CLONE_NEWNET = 0x40000000;
const EINTR = 4;
const EAGAIN = 11;
const ENOBUFS = 105;

/** the line that says events were lost (matched by watch.ts like the monitor's "We lost some netlink events!") */
export const LOST_LINE = "# lost netlink events: kpng's socket buffer overflowed";
/**
 * How soon someone else's change is read: half of it on average is added to a
 * repair, against `nft monitor`, which the kernel wakes (bench nft-repair
 * prints both). A wake-up of Bun's timer and an empty recv cost little
 * enough that this period keeps the idle cost a small fraction of a core.
 */
const POLL_MS = 50;
const BUFFER_BYTES = 16 << 20;
/** datagrams read per turn of the event loop; more wait for the next turn, so a flood (a foreign flush) never holds the loop long */
const MAX_PER_TURN = 2048;
/** one datagram: the kernel's notifications are at most a page or two each (NLMSG_GOODSIZE) */
const RECV_BYTES = 64 << 10;

const I = FFIType.i32;
const P = FFIType.ptr;
const libcSymbols = {
  socket: { args: [I, I, I], returns: I },
  bind: { args: [I, P, I], returns: I },
  setsockopt: { args: [I, I, I, P, I], returns: I },
  // ssize_t, read as its low 32 bits: -1 or at most RECV_BYTES
  recv: { args: [I, P, FFIType.u64, I], returns: I },
  close: { args: [I], returns: I },
  open: { args: [P, I], returns: I },
  setns: { args: [I, I], returns: I },
  __errno_location: { args: [], returns: P },
} as const;

type Libc = ReturnType<typeof dlopen<typeof libcSymbols>>["symbols"];
let libc: Libc | undefined;

function loadLibc(): Libc {
  if (libc) return libc;
  const errors: string[] = [];
  for (const name of ["libc.so.6", "libc.so"]) {
    try {
      return (libc = dlopen(name, libcSymbols).symbols);
    } catch (err) {
      errors.push(`${name}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  throw new KpngError("unavailable", `cannot load libc for a netlink socket (${errors.join("; ")})`);
}

const errno = (c: Libc) => read.i32(c.__errno_location()!, 0);
const cString = (s: string) => new TextEncoder().encode(`${s}\0`);

function fail(c: Libc, what: string): never {
  throw new KpngError("unavailable", `netlink: ${what} failed (errno ${errno(c)})`);
}

/** runs `f` with this thread in the network namespace `netns` (a name under /run/netns, or a path): the socket it opens stays there */
function inNetns<T>(c: Libc, netns: string, f: () => T): T {
  const self = c.open(cString("/proc/thread-self/ns/net"), O_RDONLY | O_CLOEXEC);
  if (self < 0) fail(c, "open /proc/thread-self/ns/net");
  const path = netns.includes("/") ? netns : `/run/netns/${netns}`;
  const target = c.open(cString(path), O_RDONLY | O_CLOEXEC);
  try {
    if (target < 0) fail(c, `open ${path}`);
    if (c.setns(target, CLONE_NEWNET) !== 0) fail(c, `setns ${path}`);
    try {
      return f();
    } finally {
      // biome-ignore lint/correctness/noUnsafeFinally: a thread left in another namespace must not go on; this error wins over f's
      if (c.setns(self, CLONE_NEWNET) !== 0) throw new Error(`netlink: cannot return to kpng's network namespace (errno ${errno(c)})`);
    }
  } finally {
    if (target >= 0) c.close(target);
    c.close(self);
  }
}

function openSocket(c: Libc): number {
  const fd = c.socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0) fail(c, "socket(AF_NETLINK, NETLINK_NETFILTER)");
  try {
    // struct sockaddr_nl { u16 nl_family; u16 nl_pad; u32 nl_pid (0: the kernel picks); u32 nl_groups }
    const addr = new DataView(new ArrayBuffer(12));
    addr.setUint16(0, AF_NETLINK, true);
    addr.setUint32(8, 1 << (NFNLGRP_NFTABLES - 1), true);
    if (c.bind(fd, new Uint8Array(addr.buffer), 12) !== 0) fail(c, "bind to NFNLGRP_NFTABLES");
    const size = new Int32Array([BUFFER_BYTES]);
    // FORCE goes past net.core.rmem_max (needs CAP_NET_ADMIN, which kpng has); else as much as rmem_max allows
    if (c.setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, size, 4) !== 0) c.setsockopt(fd, SOL_SOCKET, SO_RCVBUF, size, 4);
    return fd;
  } catch (err) {
    c.close(fd);
    throw err;
  }
}

/** a socket that hears of every change to the ruleset of its network namespace */
export interface EventSocket {
  /** the next datagram into `buf` (its length), "again" when none is pending, "lost" when the kernel dropped some (ENOBUFS) */
  read(buf: Uint8Array): number | "again" | "lost";
  close(): void;
}

/** opens the socket, in the network namespace `netns` (a name under /run/netns, or a path) if given; throws KpngError "unavailable" when it cannot */
export function openEventSocket(netns?: string): EventSocket {
  const c = loadLibc();
  const fd = netns ? inNetns(c, netns, () => openSocket(c)) : openSocket(c);
  let open = true;
  return {
    read(buf) {
      for (;;) {
        const n = c.recv(fd, buf, buf.byteLength, MSG_DONTWAIT);
        if (n >= 0) return n;
        const e = errno(c);
        if (e === EAGAIN) return "again";
        if (e === ENOBUFS) return "lost";
        if (e !== EINTR) throw new KpngError("unavailable", `netlink recv failed (errno ${e})`);
      }
    },
    close() {
      if (open) c.close(fd);
      open = false;
    },
  };
}

/**
 * The kernel's nftables events as watch.ts reads them. `netns`: the network
 * namespace kpng's tables are in, when it is not this process's (tests and
 * benchmarks run the backend in-process, nft in a namespace).
 */
export function netlinkEvents(opts: { netns?: string; pollMs?: number } = {}): EventSource {
  return {
    name: "netlink",
    listensAtOnce: true,
    open(on: EventHandlers): EventStream {
      const socket = openEventSocket(opts.netns);
      const buf = new Uint8Array(RECV_BYTES);
      let closed = false;
      let more: ReturnType<typeof setTimeout> | undefined;
      const close = () => {
        if (closed) return;
        closed = true;
        clearInterval(timer);
        clearTimeout(more);
        socket.close();
      };
      const poll = () => {
        for (let i = 0; i < MAX_PER_TURN && !closed; i++) {
          let n: ReturnType<EventSocket["read"]>;
          try {
            n = socket.read(buf);
          } catch (err) {
            close();
            on.exit(err instanceof Error ? err.message : String(err));
            return;
          }
          if (n === "again") return;
          if (n === "lost") on.line(LOST_LINE);
          else for (const event of parseNftEvents(buf.subarray(0, n))) for (const line of eventLines(event)) if (!closed) on.line(line);
        }
        if (!closed) more ??= setTimeout(() => ((more = undefined), poll()), 0);
      };
      const timer = setInterval(poll, opts.pollMs ?? POLL_MS);
      // kpng's servers keep it alive; a watch alone must not
      timer.unref?.();
      return { close, poll };
    },
  };
}
