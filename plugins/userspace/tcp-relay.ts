// One TCP frontend: a listener, and per accepted client a connection to an
// endpoint with bytes copied both ways.
//
// Bun's own sockets (Bun.listen / Bun.connect) rather than node:net: the
// copy loop is the whole cost of a relay, and node:net's streams (pipe,
// per-chunk events and buffering) cost more CPU per byte and connect
// latency than the native handlers (compared in
// docs/backends/userspace.md). What streams gave for free is written here, small and explicit:
//   - backpressure: a write the kernel took only part of keeps the rest
//     (`Half.pending`) and pauses the sending side until `drain`;
//   - half-close: a FIN from one side is passed on (`shutdown()`) once that
//     direction's pending bytes are out, and the other direction keeps
//     flowing (allowHalfOpen);
//   - a reset (`terminate()`: SO_LINGER 0) for a refused or removed endpoint,
//     as conntrack cleanup and reject rules give with the kernel backends.

import { type Logger, splitHostPort } from "../../src/host/toolkit/index.ts";
import type { Frontend } from "./frontends.ts";
import { FrontendChoice } from "./picker.ts";

export interface RelayOptions {
  log: Logger;
  /** where to listen; default the frontend's own address and port (bind mode) */
  listen?: { host: string; port: number };
  /** this node's IPs: clients with one of them are the node itself (eTP=Local short-circuit) */
  nodeIPs?: readonly string[];
  /** give up connecting to one endpoint after this long and try another */
  connectTimeoutMs?: number;
  now?: () => number;
}

/** the endpoints a new connection may try, in turn, before the client is reset */
const MAX_TRIES = 3;

/** One direction's sink: the socket written to, and what it has not taken yet. */
interface Half {
  socket?: Bun.Socket<Half>;
  /** the socket whose bytes are written here (paused while `pending` holds any) */
  source?: Bun.Socket<Half>;
  pending?: Uint8Array;
  /** the source sent FIN: shut this socket's write side once `pending` is out */
  finish?: boolean;
  pair?: Pair;
}

interface Pair {
  endpoint: string;
  client: Bun.Socket<Half>;
  upstream?: Bun.Socket<Half>;
  closed: boolean;
  /** the relay forgets the pair */
  forget(): void;
}

/** a peer address as the family's plain text (IPv4-mapped IPv6 unwrapped) */
export const plainAddress = (a: string | undefined) => (a?.startsWith("::ffff:") && a.includes(".") ? a.slice(7) : (a ?? ""));

/** loopback or one of the node's IPs */
export const isNodeAddress = (ip: string, nodeIPs: readonly string[] = []) => ip === "127.0.0.1" || ip === "::1" || nodeIPs.includes(ip);

/** Writes `d` to `half`'s socket; what does not fit waits, and the source pauses. */
function forward(half: Half | undefined, d: Uint8Array) {
  const to = half?.socket;
  if (!half || !to) return;
  if (half.pending) {
    half.pending = concat(half.pending, d);
    return;
  }
  const n = to.write(d);
  if (n < d.length) {
    half.pending = d.slice(Math.max(n, 0)); // a copy: the read buffer is not ours after this call
    half.source?.pause();
  }
}

const concat = (a: Uint8Array, b: Uint8Array) => {
  const c = new Uint8Array(a.length + b.length);
  c.set(a);
  c.set(b, a.length);
  return c;
};

/** Socket events of both sides; `s.data` is the Half whose socket `s` is. */
const handlers = {
  binaryType: "uint8array" as const,
  data(s: Bun.Socket<Half>, d: Uint8Array) {
    forward(peerHalf(s), d);
  },
  drain(s: Bun.Socket<Half>) {
    const half = s.data;
    if (!half.pending) return;
    const n = s.write(half.pending);
    if (n < half.pending.length) {
      half.pending = half.pending.subarray(Math.max(n, 0));
      return;
    }
    half.pending = undefined;
    half.source?.resume();
    if (half.finish) s.shutdown();
  },
  end(s: Bun.Socket<Half>) {
    const to = peerHalf(s);
    if (!to?.socket) return;
    if (to.pending) to.finish = true;
    else to.socket.shutdown();
  },
  close(s: Bun.Socket<Half>, err?: Error) {
    const pair = s.data.pair;
    if (!pair || pair.closed) return;
    const other = s === pair.client ? pair.upstream : pair.client;
    // one side is gone: an error is passed on as a reset, a clean close as a close
    if (err) other?.terminate();
    else if (other?.data.pending)
      other.data.finish = true; // its last bytes first, then the FIN (drain)
    else other?.end();
    pair.closed = true;
    pair.forget();
  },
  error(s: Bun.Socket<Half>) {
    const pair = s.data.pair;
    if (!pair) return;
    (s === pair.client ? pair.upstream : pair.client)?.terminate();
  },
};

/** the Half of the socket `s` writes to */
function peerHalf(s: Bun.Socket<Half>): Half | undefined {
  const pair = s.data.pair;
  if (!pair) return undefined;
  return (s === pair.client ? pair.upstream : pair.client)?.data;
}

export class TcpRelay {
  private listener: Bun.TCPSocketListener<Half> | undefined;
  private readonly choice: FrontendChoice;
  /** open relays by endpoint, so a removed endpoint's connections can be closed */
  private readonly open = new Map<string, Set<Pair>>();
  private readonly log: Logger;
  private readonly now: () => number;
  /** connections relayed since start (tests, bench) */
  accepted = 0;

  constructor(
    private frontend: Frontend,
    private readonly opts: RelayOptions,
  ) {
    this.log = opts.log;
    this.now = opts.now ?? Date.now;
    this.choice = new FrontendChoice(frontend);
  }

  /** resolves with the port listened on; rejects when the address cannot be bound */
  async listen(): Promise<number> {
    const at = this.opts.listen ?? { host: this.frontend.ip, port: this.frontend.port };
    this.listener = Bun.listen<Half>({
      hostname: at.host,
      port: at.port,
      exclusive: true,
      allowHalfOpen: true,
      data: {},
      socket: { ...handlers, open: (c) => this.accept(c) },
    });
    return this.listener.port;
  }

  /** New endpoints (or affinity, ranges): new connections use them at once; connections to endpoints that left are reset. */
  update(frontend: Frontend): void {
    this.frontend = frontend;
    this.choice.update(frontend);
    for (const [endpoint, pairs] of this.open) {
      if (this.choice.has(endpoint)) continue;
      // as conntrack cleanup ends a removed endpoint's flows: the client sees a reset
      for (const p of pairs) reset(p);
      this.open.delete(endpoint);
    }
  }

  get connections(): number {
    let n = 0;
    for (const s of this.open.values()) n += s.size;
    return n;
  }

  /** stops listening and resets every relayed connection */
  async close(): Promise<void> {
    for (const pairs of this.open.values()) for (const p of pairs) reset(p);
    this.open.clear();
    this.listener?.stop(true);
  }

  private accept(client: Bun.Socket<Half>) {
    client.data = {};
    const source = plainAddress(client.remoteAddress);
    if (!this.choice.admits(source)) {
      // loadBalancerSourceRanges: kernel backends drop; a process can only reset what the kernel accepted
      client.terminate();
      return;
    }
    this.accepted++;
    client.pause(); // nothing is read from the client before an endpoint takes it
    client.setNoDelay(true);
    // this node's own connections come from one of its addresses: to a local address, the kernel uses the destination itself
    const local = source === plainAddress(client.localAddress) || isNodeAddress(source, this.opts.nodeIPs);
    this.connect(client, source, local, new Set());
  }

  private connect(client: Bun.Socket<Half>, source: string, local: boolean, failed: Set<string>) {
    const endpoint = failed.size >= MAX_TRIES ? undefined : this.choice.pick(source, local, this.now(), failed);
    if (endpoint === undefined || client.readyState <= 0) {
      client.terminate();
      return;
    }
    const { ip: host, port } = splitHostPort(endpoint)!;
    let settled = false;
    const retry = (why: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      this.log.debug("endpoint did not take a connection, trying another", { frontend: this.frontend.key, endpoint, why });
      failed.add(endpoint);
      this.connect(client, source, local, failed);
    };
    const timer = setTimeout(() => retry("connect timeout"), this.opts.connectTimeoutMs ?? 5000);
    void Bun.connect<Half>({
      hostname: host,
      port,
      allowHalfOpen: true,
      data: {},
      socket: {
        ...handlers,
        open: (upstream) => {
          if (settled) return void upstream.terminate(); // timed out meanwhile: another endpoint has the client
          settled = true;
          clearTimeout(timer);
          if (client.readyState <= 0 || !this.choice.has(endpoint)) {
            // the client left, or the endpoint was removed while we connected
            upstream.terminate();
            client.terminate();
            return;
          }
          upstream.setNoDelay(true);
          this.join(client, upstream, endpoint);
        },
        connectError: (_s, err) => retry(err.message),
      },
    }).catch(() => {}); // reported through connectError
  }

  private join(client: Bun.Socket<Half>, upstream: Bun.Socket<Half>, endpoint: string) {
    let pairs = this.open.get(endpoint);
    if (!pairs) this.open.set(endpoint, (pairs = new Set()));
    const set = pairs;
    const pair: Pair = {
      endpoint,
      client,
      upstream,
      closed: false,
      forget: () => {
        set.delete(pair);
        if (!set.size && this.open.get(endpoint) === set) this.open.delete(endpoint);
      },
    };
    set.add(pair);
    client.data = { socket: client, source: upstream, pair };
    upstream.data = { socket: upstream, source: client, pair };
    client.resume();
  }
}

function reset(p: Pair) {
  p.closed = true;
  p.forget();
  p.client.terminate();
  p.upstream?.terminate();
}
