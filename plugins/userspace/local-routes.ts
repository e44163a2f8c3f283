// Bind mode: each service IP (cluster, external, LB) becomes local to the
// node through a `local` route in the kernel's local table (the "AnyIP"
// idiom), so the relays can listen on it and the node delivers its packets
// to them. A pure planner (the `ip -batch` lines) and a thin keeper.
//
// Routes, not addresses on a device (kube-proxy's IPVS mode puts them on
// kube-ipvs0): the kernel adds and deletes an IPv6 address in time that
// grows with the addresses the device already holds, which made the
// addresses most of a sync at thousands of services (README); routes go
// into a trie. A route also never makes the service
// IP a candidate source for the node's own connections. IPv4 binds to an
// address of a local route as to its own; IPv6 binds only to addresses a
// device holds, unless net.ipv6.ip_nonlocal_bind is set (setup sets it).
//
// kpng's routes carry their own protocol number (names.ts), so reading,
// syncing and --cleanup touch nothing else of the local table.

import type { Executor } from "../../src/plugins/toolkit/index.ts";
import { ROUTE_PROTO } from "./names.ts";

const prefix = (ip: string) => (ip.includes(":") ? `${ip}/128` : `${ip}/32`);
const route = (ip: string) => `local ${prefix(ip)} dev lo table local proto ${ROUTE_PROTO}`;

/** `ip -batch` lines moving the local table from `have` to `want` (pure) */
export function routeBatch(have: ReadonlySet<string>, want: ReadonlySet<string>): string[] {
  const out: string[] = [];
  for (const ip of have) if (!want.has(ip)) out.push(`route del ${route(ip)}`);
  for (const ip of want) if (!have.has(ip)) out.push(`route replace ${route(ip)}`);
  return out;
}

/** destinations of `ip -j route show table local proto N` */
export function parseRoutes(json: string): Set<string> {
  const out = new Set<string>();
  for (const r of JSON.parse(json.trim() || "[]") as { dst?: string }[]) if (r.dst) out.add(r.dst.replace(/\/(32|128)$/, ""));
  return out;
}

export class LocalRoutes {
  /** what the local table holds of kpng's, as last read or written; undefined = read it first */
  private have: Set<string> | undefined;

  constructor(private readonly exec: Executor) {}

  /** lets IPv6 relays bind service IPs no device holds */
  async setup(): Promise<void> {
    await this.exec.run(["sysctl", "-q", "-w", "net.ipv6.ip_nonlocal_bind=1"]);
    this.have = undefined;
  }

  /** makes kpng's local routes exactly `want` */
  async sync(want: ReadonlySet<string>): Promise<void> {
    this.have ??= await this.read();
    const batch = routeBatch(this.have, want);
    if (!batch.length) return;
    try {
      await this.exec.run(["ip", "-batch", "-"], batch.join("\n") + "\n");
      this.have = new Set(want);
    } catch (err) {
      this.have = undefined; // part of the batch may have gone in: read again next time
      throw err;
    }
  }

  /** `--cleanup`: every route of kpng's (the sysctl stays, as kube-proxy leaves its own) */
  async cleanup(): Promise<void> {
    for (const fam of ["-4", "-6"])
      await this.exec.run(["ip", fam, "route", "flush", "table", "local", "proto", String(ROUTE_PROTO)]).catch(() => {});
    this.have = undefined;
  }

  private async read(): Promise<Set<string>> {
    const out = new Set<string>();
    for (const fam of ["-4", "-6"])
      for (const ip of parseRoutes(await this.exec.run(["ip", "-j", fam, "route", "show", "table", "local", "proto", String(ROUTE_PROTO)])))
        out.add(ip);
    return out;
  }
}
