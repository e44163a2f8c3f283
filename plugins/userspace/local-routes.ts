// Bind mode: each service IP (cluster, external, LB) becomes local to the
// node through a `local` route in the kernel's local table (the "AnyIP"
// idiom), so the relays can listen on it and the node delivers its packets
// to them. A pure planner (the `ip -batch` lines) and a thin keeper.
//
// Routes, not addresses on a device (kube-proxy's IPVS mode puts them on
// kube-ipvs0): the kernel adds and deletes an IPv6 address in time that
// grows with the addresses the device already holds, which made the
// addresses most of a sync at thousands of services (docs/backends/userspace.md); routes go
// into a trie. A route also never makes the service
// IP a candidate source for the node's own connections. IPv4 binds to an
// address of a local route as to its own; IPv6 binds only to addresses a
// device holds, unless net.ipv6.ip_nonlocal_bind is set (setup sets it).
//
// Ownership (issue 39). kpng's routes carry their own protocol number
// (names.ts), and kpng touches no other route of the local table:
// - an address that is already local (a node IP, any interface's address:
//   the kernel's `local X dev eth0 proto kernel` route) needs no route from
//   kpng, and gets none; kpng remembers it added none, so nothing is
//   removed when the service goes;
// - routes are added with `append`, never `replace`: in the IPv4 local
//   table `replace` overwrites the kernel's route of the same destination
//   (same tos and priority), and the later delete of kpng's route then took
//   the node's own address away from it (the node could no longer reach
//   itself). `append` next to a route kpng did not see fails or adds a
//   sibling; it never takes one over;
// - a delete names the exact route kpng added (type, table, device, scope
//   and proto), and `--cleanup` flushes by proto only.

import type { Executor } from "../../src/host/toolkit/index.ts";
import { ROUTE_PROTO } from "./names.ts";

const prefix = (ip: string) => (ip.includes(":") ? `${ip}/128` : `${ip}/32`);
/** the one route shape kpng adds and deletes */
const route = (ip: string) => `local ${prefix(ip)} dev lo table local proto ${ROUTE_PROTO} scope host`;
const host = (dst: string) => dst.replace(/\/(32|128)$/, "");
const isHost = (dst: string) => !dst.includes("/") || /\/(32|128)$/.test(dst);

export interface RouteBatch {
  /** `ip -batch` lines */
  lines: string[];
  /** wanted addresses already local by a route kpng does not own: no route added for them */
  alreadyLocal: Set<string>;
}

/**
 * `ip -batch` lines moving kpng's routes from `have` to `want` (pure).
 * `others`: destinations some other owner (the kernel, an operator) holds a
 * local route for; kpng adds no route for those.
 */
export function routeBatch(have: ReadonlySet<string>, want: ReadonlySet<string>, others: ReadonlySet<string> = new Set()): RouteBatch {
  const lines: string[] = [];
  const alreadyLocal = new Set<string>();
  for (const ip of have) if (!want.has(ip)) lines.push(`route del ${route(ip)}`);
  for (const ip of want) {
    if (have.has(ip)) continue;
    if (others.has(ip)) alreadyLocal.add(ip);
    else lines.push(`route append ${route(ip)}`);
  }
  return { lines, alreadyLocal };
}

type RouteJson = { type?: string; dst?: string };
const parse = (json: string) => JSON.parse(json.trim() || "[]") as RouteJson[];

/** destinations of `ip -j route show table local proto N` (kpng's routes) */
export function parseRoutes(json: string): Set<string> {
  const out = new Set<string>();
  for (const r of parse(json)) if (r.dst) out.add(host(r.dst));
  return out;
}

/**
 * Host destinations made local by a route kpng does not own, from
 * `ip -j route show table local type local` (every owner's) and kpng's own
 * (`ours`): kpng holds at most one route per destination, so a destination
 * listed more often than kpng's share is someone else's too.
 */
export function othersLocal(allJson: string, ours: ReadonlySet<string>): Set<string> {
  const count = new Map<string, number>();
  for (const r of parse(allJson)) {
    if (!r.dst || (r.type !== undefined && r.type !== "local") || !isHost(r.dst)) continue;
    const ip = host(r.dst);
    count.set(ip, (count.get(ip) ?? 0) + 1);
  }
  const out = new Set<string>();
  for (const [ip, n] of count) if (n > (ours.has(ip) ? 1 : 0)) out.add(ip);
  return out;
}

const families = ["-4", "-6"] as const;

export class LocalRoutes {
  /** kpng's routes in the local table, as last read or written; undefined = read it first */
  private have: Set<string> | undefined;
  /** wanted addresses kpng added no route for, because they were local already (re-checked at each sync) */
  private notAdded = new Set<string>();

  constructor(private readonly exec: Executor) {}

  /** lets IPv6 relays bind service IPs no device holds */
  async setup(): Promise<void> {
    await this.exec.run(["sysctl", "-q", "-w", "net.ipv6.ip_nonlocal_bind=1"]);
    this.have = undefined;
  }

  /** the wanted addresses that were local already at the last sync (kpng added no route) */
  get alreadyLocal(): ReadonlySet<string> {
    return this.notAdded;
  }

  /** makes kpng's local routes exactly `want`, less the addresses local already */
  async sync(want: ReadonlySet<string>): Promise<void> {
    this.have ??= await this.readOurs();
    const have = this.have;
    // the local table is read only when something may be added: an address local already gets no route
    const others = [...want].some((ip) => !have.has(ip)) ? await this.readOthers(have) : new Set<string>();
    const { lines, alreadyLocal } = routeBatch(have, want, others);
    this.notAdded = alreadyLocal;
    if (!lines.length) return;
    try {
      // -force: one failed line (a route that appeared since the read) does not stop the others
      await this.exec.run(["ip", "-force", "-batch", "-"], lines.join("\n") + "\n");
      this.have = new Set([...want].filter((ip) => !alreadyLocal.has(ip)));
    } catch (err) {
      this.have = undefined; // part of the batch may have gone in: read again next time
      throw err;
    }
  }

  /** `--cleanup`: every route of kpng's, by its proto (the sysctl stays, as kube-proxy leaves its own) */
  async cleanup(): Promise<void> {
    for (const fam of families)
      await this.exec.run(["ip", fam, "route", "flush", "table", "local", "proto", String(ROUTE_PROTO)]).catch(() => {});
    this.have = undefined;
    this.notAdded = new Set();
  }

  private async readOurs(): Promise<Set<string>> {
    const out = new Set<string>();
    for (const fam of families)
      for (const ip of parseRoutes(await this.exec.run(["ip", "-j", fam, "route", "show", "table", "local", "proto", String(ROUTE_PROTO)])))
        out.add(ip);
    return out;
  }

  private async readOthers(ours: ReadonlySet<string>): Promise<Set<string>> {
    const out = new Set<string>();
    for (const fam of families)
      for (const ip of othersLocal(await this.exec.run(["ip", "-j", fam, "route", "show", "table", "local", "type", "local"]), ours))
        out.add(ip);
    return out;
  }
}
