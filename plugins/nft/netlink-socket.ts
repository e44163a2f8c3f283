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
//
// The same libc, another socket: the one a first load sends its elements on
// (openBatchSocket, the batch encoded by netlink-batch.ts).

import { FFIType, dlopen, read } from "bun:ffi";
import { KpngError } from "../../src/host/toolkit/index.ts";
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
const SO_SNDBUF = 7;
const SO_SNDBUFFORCE = 32;
const SOL_NETLINK = 270;
/** errors without a copy of the refused message, with the offset of the attribute refused (linux/netlink.h) */
const NETLINK_CAP_ACK = 10;
const NETLINK_EXT_ACK = 11;
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
  // ssize_t, read as its low 32 bits: -1 or the batch's length (far below 2 GB)
  send: { args: [I, P, FFIType.u64, I], returns: I },
  strerror: { args: [I], returns: FFIType.cstring },
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

/** sets a socket buffer's size: FORCE goes past net.core.[rw]mem_max (needs CAP_NET_ADMIN, which kpng has); else as much as that allows */
function bufferSize(c: Libc, fd: number, force: number, plain: number, bytes: number): boolean {
  const size = new Int32Array([bytes]);
  return c.setsockopt(fd, SOL_SOCKET, force, size, 4) === 0 || c.setsockopt(fd, SOL_SOCKET, plain, size, 4) === 0;
}

/** a NETLINK_NETFILTER socket, joined to `groups` (a bit mask of multicast groups) */
function openSocket(c: Libc, groups: number, setup: (fd: number) => void): number {
  const fd = c.socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0) fail(c, "socket(AF_NETLINK, NETLINK_NETFILTER)");
  try {
    // struct sockaddr_nl { u16 nl_family; u16 nl_pad; u32 nl_pid (0: the kernel picks); u32 nl_groups }
    const addr = new DataView(new ArrayBuffer(12));
    addr.setUint16(0, AF_NETLINK, true);
    addr.setUint32(8, groups, true);
    if (c.bind(fd, new Uint8Array(addr.buffer), 12) !== 0) fail(c, groups ? "bind to NFNLGRP_NFTABLES" : "bind");
    setup(fd);
    return fd;
  } catch (err) {
    c.close(fd);
    throw err;
  }
}

const inNamespace = <T>(c: Libc, netns: string | undefined, f: () => T): T => (netns ? inNetns(c, netns, f) : f());

/** a socket that hears of every change to the ruleset of its network namespace */
export interface EventSocket {
  /** the next datagram into `buf` (its length), "again" when none is pending, "lost" when the kernel dropped some (ENOBUFS) */
  read(buf: Uint8Array): number | "again" | "lost";
  close(): void;
}

/** opens the socket, in the network namespace `netns` (a name under /run/netns, or a path) if given; throws KpngError "unavailable" when it cannot */
export function openEventSocket(netns?: string): EventSocket {
  const c = loadLibc();
  const fd = inNamespace(c, netns, () =>
    openSocket(c, 1 << (NFNLGRP_NFTABLES - 1), (fd) => bufferSize(c, fd, SO_RCVBUFFORCE, SO_RCVBUF, BUFFER_BYTES)),
  );
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

/**
 * A socket that sends nfnetlink batches (netlink-batch.ts) and returns the
 * kernel's answers. The kernel runs a batch inside the send() that carries
 * it (nfnetlink_rcv, in the sender's context): when send returns, every
 * error is already queued, and reading without blocking until nothing is
 * left reads them all, as nft does. No answer means the batch committed.
 * The whole batch goes in one send (the kernel takes a batch per skb): the
 * send buffer is made as big as the batch.
 */
export interface BatchSocket {
  /** sends the batch; the datagrams the kernel answered with. Throws KpngError "unavailable" when the batch could not be sent at all */
  send(batch: Uint8Array): Uint8Array[];
  close(): void;
}

/** errors for a batch that failed whole, each without the refused message (NETLINK_CAP_ACK): a few hundred bytes per message of the batch */
const ANSWER_BUFFER_BYTES = 4 << 20;

/** opens the socket, in the network namespace `netns` (a name under /run/netns, or a path) if given; throws KpngError "unavailable" when it cannot */
export function openBatchSocket(netns?: string): BatchSocket {
  const c = loadLibc();
  const fd = inNamespace(c, netns, () =>
    openSocket(c, 0, (fd) => {
      const on = new Int32Array([1]);
      if (c.setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, on, 4) !== 0) fail(c, "setsockopt NETLINK_CAP_ACK");
      if (c.setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, on, 4) !== 0) fail(c, "setsockopt NETLINK_EXT_ACK");
      bufferSize(c, fd, SO_RCVBUFFORCE, SO_RCVBUF, ANSWER_BUFFER_BYTES);
    }),
  );
  let open = true;
  return {
    send(batch) {
      if (!bufferSize(c, fd, SO_SNDBUFFORCE, SO_SNDBUF, batch.byteLength)) fail(c, "setsockopt SO_SNDBUF");
      for (;;) {
        const n = c.send(fd, batch, batch.byteLength, 0);
        if (n === batch.byteLength) break;
        const e = errno(c);
        if (n >= 0 || e !== EINTR)
          throw new KpngError("unavailable", `netlink send of ${batch.byteLength} bytes failed: ${strerror(c, n < 0 ? e : 0)}`);
      }
      const answers: Uint8Array[] = [];
      const buf = new Uint8Array(RECV_BYTES);
      for (;;) {
        const n = c.recv(fd, buf, buf.byteLength, MSG_DONTWAIT);
        if (n >= 0) {
          answers.push(buf.slice(0, n));
          continue;
        }
        const e = errno(c);
        if (e === EAGAIN) return answers;
        // answers were dropped: there were errors, so the batch was refused
        if (e === ENOBUFS) throw new KpngError("internal", "netlink: the kernel refused the batch (its errors overflowed kpng's socket)");
        if (e !== EINTR) throw new KpngError("internal", `netlink recv failed: ${strerror(c, e)}`);
      }
    },
    close() {
      if (open) c.close(fd);
      open = false;
    },
  };
}

/** the C library's words for an errno, as nft prints them */
export function errnoText(errnum: number): string {
  try {
    return strerror(loadLibc(), errnum);
  } catch {
    return `errno ${errnum}`;
  }
}

const strerror = (c: Libc, errnum: number) => (errnum ? String(c.strerror(errnum)) : "short write");
