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
//   reconcileConntrack(exec, flows, log, report)  the same per family, timed
//                      and counted for kube-proxy's conntrack reconciler metrics.
//   parseUdpEntries / matches        the one-dump path used for many flows.
//
// Families are IP versions here (4, 6), as `conntrack -f` and
// BackendMetrics take them.

import type { Logger } from "../../core/log.ts";
import type { Executor } from "../backend.ts";
import { splitHostPort, type IPVersion } from "./family.ts";

export interface UdpFrontend {
  /** service IP (cluster, external or LB); undefined = node port on any node address */
  ip?: string;
  family: IPVersion;
  /** service port, or the node port when `ip` is undefined */
  port: number;
  /** endpoints packets to this frontend are DNATed to, as "ip:port" / "[ip6]:port" */
  endpoints: readonly string[];
}

/** A set of conntrack entries to delete (all UDP). */
export interface StaleFlow {
  family: IPVersion;
  /** original destination IP; undefined = any (node ports) */
  dst?: string;
  dport: number;
  /** only entries DNATed to this endpoint ("ip:port"); undefined = every entry to dst:dport */
  endpoint?: string;
}

export const frontendKey = (f: Pick<UdpFrontend, "ip" | "family" | "port">) =>
  f.ip === undefined ? `nodeport/${f.family}/${f.port}` : `${f.ip}/${f.port}`;

/** What to delete after a sync moved from `prev` to `next` (both keyed by frontendKey). */
export function staleUdpFlows(prev: ReadonlyMap<string, UdpFrontend>, next: ReadonlyMap<string, UdpFrontend>): StaleFlow[] {
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

export function conntrackArgv(f: StaleFlow): string[] {
  const argv = ["conntrack", "-D", "-f", f.family === 6 ? "ipv6" : "ipv4", "-p", "udp"];
  if (f.dst !== undefined) argv.push("--orig-dst", f.dst);
  argv.push("--orig-port-dst", String(f.dport));
  if (f.endpoint !== undefined) {
    const { ip, port } = splitHostPort(f.endpoint)!;
    argv.push("--reply-src", ip, "--reply-port-src", String(port));
  }
  return argv;
}

const nothingDeleted = /0 flow entries have been deleted/;

/** One UDP conntrack entry, as `conntrack -L` prints it. */
export interface UdpEntry {
  family: IPVersion;
  src: string;
  dst: string;
  sport: number;
  dport: number;
  replySrc: string;
  replySport: number;
}

/** Parses `conntrack -L -p udp` lines: `udp 17 29 src=… dst=… sport=… dport=… [UNREPLIED] src=… dst=… sport=… dport=… …`. */
export function parseUdpEntries(text: string, family: IPVersion): UdpEntry[] {
  const out: UdpEntry[] = [];
  for (const line of text.split("\n")) {
    const src = [...line.matchAll(/\bsrc=(\S+)/g)].map((m) => m[1]);
    const dst = [...line.matchAll(/\bdst=(\S+)/g)].map((m) => m[1]);
    const sport = [...line.matchAll(/\bsport=(\d+)/g)].map((m) => Number(m[1]));
    const dport = [...line.matchAll(/\bdport=(\d+)/g)].map((m) => Number(m[1]));
    if (!line.startsWith("udp") || src.length < 2 || dst.length < 1 || sport.length < 2 || dport.length < 1) continue;
    out.push({ family, src: src[0], dst: dst[0], sport: sport[0], dport: dport[0], replySrc: src[1], replySport: sport[1] });
  }
  return out;
}

/**
 * An address in RFC 5952 form, as conntrack and ipset print IPv6; the state
 * may hold any valid spelling ("2001:db8:2:0::1").
 */
export const canonicalIP = (ip: string) => (ip.includes(":") ? new URL(`http://[${ip}]/`).hostname.slice(1, -1) : ip);

export function matches(f: StaleFlow, e: UdpEntry): boolean {
  if (f.family !== e.family || f.dport !== e.dport || (f.dst !== undefined && canonicalIP(f.dst) !== canonicalIP(e.dst))) return false;
  if (f.endpoint === undefined) return true;
  const { ip, port } = splitHostPort(f.endpoint)!;
  return canonicalIP(ip) === canonicalIP(e.replySrc) && port === e.replySport;
}

const entryArgv = (e: UdpEntry) => [
  "conntrack",
  "-D",
  "-f",
  e.family === 6 ? "ipv6" : "ipv4",
  "-p",
  "udp",
  "--orig-src",
  e.src,
  "--orig-dst",
  e.dst,
  "--orig-port-src",
  String(e.sport),
  "--orig-port-dst",
  String(e.dport),
];

/**
 * Deletes the flows; returns how many deletions failed. Cleanup is best
 * effort (upstream logs and carries on): a failure here must not fail a sync
 * whose rules are already in place.
 *
 * `conntrack -D` with filters dumps the whole table to find its matches, so
 * for more than one flow this dumps once per family, matches here, and
 * deletes only the entries that exist (usually none): a first sync of
 * thousands of UDP services costs two dumps, not thousands.
 */
export async function deleteStaleUdpFlows(exec: Executor, flows: readonly StaleFlow[], log: Logger): Promise<number> {
  return (await removeStaleUdpFlows(exec, flows, log)).failed;
}

/** deleteStaleUdpFlows, telling how many deletions succeeded and how many failed. */
export async function removeStaleUdpFlows(
  exec: Executor,
  flows: readonly StaleFlow[],
  log: Logger,
): Promise<{ deleted: number; failed: number }> {
  const total = { deleted: 0, failed: 0 };
  for (const family of [4, 6] as const) {
    const r = await removeFamily(exec, flows, family, log);
    total.deleted += r.deleted;
    total.failed += r.failed;
  }
  return total;
}

/** The flows of `family` among `flows`: one filtered delete when `flows` is one flow, else one dump of the family. */
async function removeFamily(
  exec: Executor,
  flows: readonly StaleFlow[],
  family: IPVersion,
  log: Logger,
): Promise<{ deleted: number; failed: number }> {
  const mine = flows.filter((f) => f.family === family);
  if (!mine.length) return { deleted: 0, failed: 0 };
  if (flows.length === 1) return deleteEach(exec, mine.map(conntrackArgv), log);
  let listing: string;
  try {
    listing = await exec.run(["conntrack", "-L", "-f", family === 6 ? "ipv6" : "ipv4", "-p", "udp"]);
  } catch (err) {
    log.warn("conntrack listing failed", { err: err instanceof Error ? err.message : String(err) });
    return { deleted: 0, failed: mine.length };
  }
  const doomed = parseUdpEntries(listing, family).filter((e) => mine.some((f) => matches(f, e)));
  return deleteEach(exec, doomed.map(entryArgv), log);
}

/** Where a backend reports its conntrack cleanups (kube-proxy's conntrack reconciler metrics). */
export type ConntrackReport = (family: IPVersion, seconds: number, deleted: number) => void;

/**
 * The cleanup after a sync, reported per family as kube-proxy reports its
 * conntrack reconciler's run (CleanStaleEntries, after every sync, per
 * family): how long it took and how many deletions succeeded (a
 * `conntrack -D` by filter counts one, whatever it matched).
 */
export async function reconcileConntrack(
  exec: Executor,
  flows: readonly StaleFlow[],
  log: Logger,
  report?: ConntrackReport,
): Promise<void> {
  for (const family of [4, 6] as const) {
    const t0 = performance.now();
    const { deleted } = await removeFamily(exec, flows, family, log);
    report?.(family, (performance.now() - t0) / 1000, deleted);
  }
}

// conntrack(8) exits 1 with this message when the filter matched nothing
// (the entry expired meanwhile): not a failure.
async function deleteEach(exec: Executor, argvs: string[][], log: Logger): Promise<{ deleted: number; failed: number }> {
  let deleted = 0;
  let failed = 0;
  for (const argv of argvs) {
    try {
      await exec.run(argv);
      deleted++;
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      if (nothingDeleted.test(msg)) continue;
      failed++;
      log.warn("conntrack cleanup failed", { argv: argv.join(" "), err: msg });
    }
  }
  return { deleted, failed };
}
