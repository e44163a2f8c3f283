// Stale UDP conntrack cleanup, shared by the nft and iptables backends.
//
// UDP has no connection end: a conntrack entry lives as long as packets keep
// coming, so a client that keeps sending from one port stays glued to what the
// entry says even after the rules changed. Upstream kube-proxy
// (pkg/proxy/conntrack/cleanup.go) therefore deletes, after each sync:
//   - entries DNATed to an endpoint that is gone (else the flow keeps going to
//     a dead pod);
//   - entries to a service IP / node port that had no endpoint before (they
//     were created while the packets were rejected, without DNAT, and would
//     keep bypassing the new DNAT rules).
//
// API (small and stable):
//   UdpFrontend        one UDP destination a backend programs: a service IP
//                      and port, or a node port (`ip` undefined), with the
//                      endpoints ("ip:port" or "[ip6]:port") it balances to.
//   frontendKey(f)     the identity to key frontends by.
//   staleUdpFlows(prev, next)        pure: what to delete between two syncs.
//   conntrackArgv(flow)              pure: the `conntrack -D` argv for one flow.
//   deleteStaleUdpFlows(exec, flows, log)  runs them; best effort, never throws.

import type { Logger } from "../core/log.ts";
import type { Executor } from "./backend.ts";

export interface UdpFrontend {
  /** service IP (cluster, external or LB); undefined = node port on any node address */
  ip?: string;
  family: 4 | 6;
  /** service port, or the node port when `ip` is undefined */
  port: number;
  /** endpoints packets to this frontend are DNATed to, as "ip:port" / "[ip6]:port" */
  endpoints: readonly string[];
}

/** A set of conntrack entries to delete (all UDP). */
export interface StaleFlow {
  family: 4 | 6;
  /** original destination IP; undefined = any (node ports) */
  dst?: string;
  dport: number;
  /** only entries DNATed to this endpoint ("ip:port"); undefined = every entry to dst:dport */
  endpoint?: string;
}

export const frontendKey = (f: Pick<UdpFrontend, "ip" | "family" | "port">) =>
  f.ip === undefined ? `nodeport/${f.family}/${f.port}` : `${f.ip}/${f.port}`;

/** What to delete after a sync moved from `prev` to `next` (both keyed by frontendKey). */
export function staleUdpFlows(
  prev: ReadonlyMap<string, UdpFrontend>,
  next: ReadonlyMap<string, UdpFrontend>,
): StaleFlow[] {
  const out: StaleFlow[] = [];
  const flow = (f: UdpFrontend, endpoint?: string): StaleFlow => ({ family: f.family, dst: f.ip, dport: f.port, endpoint });
  for (const [key, before] of prev) {
    const after = next.get(key);
    if (!after) {
      if (before.endpoints.length) out.push(flow(before)); // frontend gone: everything to it is stale
      continue;
    }
    const kept = new Set(after.endpoints);
    for (const ep of before.endpoints) if (!kept.has(ep)) out.push(flow(before, ep));
  }
  for (const [key, after] of next) {
    const before = prev.get(key);
    if (after.endpoints.length && !before?.endpoints.length) out.push(flow(after));
  }
  return out;
}

/** "198.19.0.1:53" / "[2001:db8:2::1]:53" -> ["198.19.0.1", 53] */
export function splitHostPort(hp: string): [string, number] {
  const i = hp.lastIndexOf(":");
  const host = hp.slice(0, i);
  return [host.startsWith("[") ? host.slice(1, -1) : host, Number(hp.slice(i + 1))];
}

export function conntrackArgv(f: StaleFlow): string[] {
  const argv = ["conntrack", "-D", "-f", f.family === 6 ? "ipv6" : "ipv4", "-p", "udp"];
  if (f.dst !== undefined) argv.push("--orig-dst", f.dst);
  argv.push("--orig-port-dst", String(f.dport));
  if (f.endpoint !== undefined) {
    const [ip, port] = splitHostPort(f.endpoint);
    argv.push("--reply-src", ip, "--reply-port-src", String(port));
  }
  return argv;
}

// conntrack(8) exits 1 with this message when the filter matched nothing:
// that is the common case, not a failure.
const nothingDeleted = /0 flow entries have been deleted/;

/**
 * Deletes the flows; returns how many deletions failed. Cleanup is best
 * effort (upstream logs and carries on): a failure here must not fail a sync
 * whose rules are already in place.
 */
export async function deleteStaleUdpFlows(exec: Executor, flows: readonly StaleFlow[], log: Logger): Promise<number> {
  let failed = 0;
  for (const f of flows) {
    const argv = conntrackArgv(f);
    try {
      await exec.run(argv);
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      if (nothingDeleted.test(msg)) continue;
      failed++;
      log.warn("conntrack cleanup failed", { argv: argv.join(" "), err: msg });
    }
  }
  return failed;
}
