// One TCP frontend: a listener, and per accepted client a connection to an
// endpoint with bytes copied both ways.
//
// node:net rather than Bun.listen/Bun.connect: the relay needs backpressure
// both ways (a fast sender must not fill the process's memory while the
// other side reads slowly), half-close (a client's FIN must reach the
// endpoint while the answer still flows back) and a reset (RST, not FIN) to
// pass on a refusal or a removed endpoint. `pipe()` with allowHalfOpen gives
// the first two and `resetAndDestroy()` the third; with Bun.listen each is
// hand-written buffering on top of `write()`'s partial counts. Bun implements
// node:net on the same native sockets, so the copy loop stays native-backed.

import net from "node:net";
import { BlockList } from "node:net";
import type { Logger } from "../../src/core/log.ts";
import type { Frontend } from "./frontends.ts";
import { Picker } from "./picker.ts";

export interface RelayOptions {
  log: Logger;
  /** where to listen; default the frontend's own address and port (bind mode) */
  listen?: { host: string; port: number };
  /** give up connecting to one endpoint after this long and try another */
  connectTimeoutMs?: number;
  now?: () => number;
}

/** the endpoints a new connection may try, in turn, before the client is reset */
const MAX_TRIES = 3;

interface Pair {
  client: net.Socket;
  upstream: net.Socket;
}

/** parsed "ip:port" / "[ip6]:port" */
export function splitEndpoint(e: string): { host: string; port: number } {
  const i = e.lastIndexOf(":");
  const host = e.slice(0, i);
  return { host: host.startsWith("[") ? host.slice(1, -1) : host, port: Number(e.slice(i + 1)) };
}

/** a BlockList of loadBalancerSourceRanges; undefined = everyone allowed */
export function allowList(ranges: readonly string[] | undefined): BlockList | undefined {
  if (ranges === undefined) return undefined;
  const list = new BlockList();
  for (const r of ranges) {
    const [net_, bits] = r.split("/");
    const v6 = net_!.includes(":");
    list.addSubnet(net_!, Number(bits ?? (v6 ? 128 : 32)), v6 ? "ipv6" : "ipv4");
  }
  return list;
}

/** a peer address as the family's plain text (IPv4-mapped IPv6 unwrapped) */
export const plainAddress = (a: string | undefined) => (a?.startsWith("::ffff:") && a.includes(".") ? a.slice(7) : (a ?? ""));

export class TcpRelay {
  private readonly server: net.Server;
  private readonly picker: Picker;
  private allowed: BlockList | undefined;
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
    this.picker = new Picker(frontend.endpoints, ms(frontend.affinitySeconds));
    this.allowed = allowList(frontend.sourceRanges);
    // pauseOnConnect: nothing is read from the client before an endpoint takes it
    this.server = net.createServer({ allowHalfOpen: true, pauseOnConnect: true, noDelay: true }, (c) => this.accept(c));
  }

  /** resolves with the port listened on; rejects when the address cannot be bound */
  listen(): Promise<number> {
    const at = this.opts.listen ?? { host: this.frontend.ip, port: this.frontend.port };
    return new Promise((resolve, reject) => {
      const onError = (err: Error) => reject(err);
      this.server.once("error", onError);
      this.server.listen({ host: at.host, port: at.port, exclusive: true, ipv6Only: at.host.includes(":"), backlog: 4096 }, () => {
        this.server.off("error", onError);
        this.server.on("error", (err) => this.log.warn("listener error", { frontend: this.frontend.key, err: err.message }));
        resolve((this.server.address() as net.AddressInfo).port);
      });
    });
  }

  /** New endpoints (or affinity, ranges): new connections use them at once; connections to endpoints that left are closed. */
  update(frontend: Frontend): void {
    this.frontend = frontend;
    this.picker.update(frontend.endpoints, ms(frontend.affinitySeconds));
    this.allowed = allowList(frontend.sourceRanges);
    const kept = new Set(frontend.endpoints);
    for (const [endpoint, pairs] of this.open) {
      if (kept.has(endpoint)) continue;
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
  close(): Promise<void> {
    for (const pairs of this.open.values()) for (const p of pairs) reset(p);
    this.open.clear();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: net.Socket) {
    const source = plainAddress(client.remoteAddress);
    if (this.allowed && !this.allowed.check(source, source.includes(":") ? "ipv6" : "ipv4")) {
      // loadBalancerSourceRanges: kernel backends drop; a process can only refuse what it accepted
      client.resetAndDestroy();
      return;
    }
    this.accepted++;
    client.on("error", () => {});
    this.connect(client, source, new Set());
  }

  private connect(client: net.Socket, source: string, failed: Set<string>) {
    const endpoint = this.picker.pick(source, this.now(), failed);
    if (endpoint === undefined || failed.size >= MAX_TRIES || client.destroyed) {
      client.resetAndDestroy();
      return;
    }
    const { host, port } = splitEndpoint(endpoint);
    const upstream = net.connect({ host, port, allowHalfOpen: true, noDelay: true });
    const timer = setTimeout(() => upstream.destroy(new Error("connect timeout")), this.opts.connectTimeoutMs ?? 5000);
    const onConnectError = (err: Error) => {
      clearTimeout(timer);
      this.log.debug("endpoint refused a connection, trying another", { frontend: this.frontend.key, endpoint, err: err.message });
      failed.add(endpoint);
      this.connect(client, source, failed);
    };
    upstream.once("error", onConnectError);
    upstream.once("connect", () => {
      clearTimeout(timer);
      upstream.off("error", onConnectError);
      if (client.destroyed || !this.frontend.endpoints.includes(endpoint)) {
        // the client left, or the endpoint was removed while we connected
        upstream.resetAndDestroy();
        if (!client.destroyed) client.resetAndDestroy();
        return;
      }
      this.join({ client, upstream }, endpoint);
    });
  }

  private join(p: Pair, endpoint: string) {
    let pairs = this.open.get(endpoint);
    if (!pairs) this.open.set(endpoint, (pairs = new Set()));
    pairs.add(p);
    const done = () => {
      pairs.delete(p);
      if (!pairs.size && this.open.get(endpoint) === pairs) this.open.delete(endpoint);
    };
    // A reset on one side is passed on as a reset; a close after FINs both ways ends both.
    p.upstream.on("error", () => {
      if (!p.client.destroyed) p.client.resetAndDestroy();
    });
    p.client.on("error", () => {
      if (!p.upstream.destroyed) p.upstream.resetAndDestroy();
    });
    p.upstream.on("close", () => {
      done();
      p.client.destroy();
    });
    p.client.on("close", () => {
      done();
      p.upstream.destroy();
    });
    p.client.pipe(p.upstream);
    p.upstream.pipe(p.client);
    p.client.resume();
  }
}

function reset(p: Pair) {
  if (!p.client.destroyed) p.client.resetAndDestroy();
  if (!p.upstream.destroyed) p.upstream.resetAndDestroy();
}

const ms = (seconds: number | undefined) => (seconds === undefined ? undefined : seconds * 1000);
