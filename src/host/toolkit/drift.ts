// What every backend's `verify` (Backend.verify, `kpng verify`) shares: how
// a frontend is named in a Drift, how one check narrows to a Service, and
// how a list of differences reads on one log line.

import type { Drift } from "../backend.ts";
import { hostPort } from "./family.ts";

/** "10.96.0.10:53/UDP", "[fd00::a]:80/TCP", "nodePort 30080/TCP": as Drift.frontend names them */
export function frontendName(f: { ip?: string; port: number; protocol: string; nodePort?: boolean }): string {
  const proto = f.protocol.toUpperCase();
  if (f.nodePort) return `nodePort ${f.port}/${proto}`;
  return f.ip === undefined ? `${f.port}/${proto}` : `${hostPort(f.ip, f.port)}/${proto}`;
}

/** "ns/name/tcp/http" (the port ids nft and iptables comments carry) -> "ns/name"; "" when it is not one */
export function serviceOfComment(comment: string | undefined): string {
  const m = comment && /^([a-z0-9][-a-z0-9.]*)\/([a-z0-9][-a-z0-9.]*)(?:[/:\s]|$)/.exec(comment);
  return m ? `${m[1]}/${m[2]}` : "";
}

/**
 * The differences that concern `service` ("namespace/name"; all when
 * undefined), sorted by service, frontend, kind and detail so two checks of
 * the same kernel read the same.
 */
export function narrowDrift(drifts: readonly Drift[], service?: string): Drift[] {
  const out = service === undefined ? [...drifts] : drifts.filter((d) => d.service === service);
  const key = (d: Drift) => `${d.service}\u0000${d.frontend}\u0000${d.kind}\u0000${d.detail}`;
  return out.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
}

/** one difference on one line: "default/web 10.96.0.10:80/TCP: element … in map ip kpng service-ips" */
export const driftLine = (d: Drift) => `${d.service || "(base rules)"}${d.frontend ? ` ${d.frontend}` : ""}: ${d.detail}`;

/**
 * The differences as one log field: the first `max`, then how many more
 * (a flushed table at scale is 100,000s of them); `withKind` starts each with
 * its kind (missing, extra, differs).
 */
export function driftSummary(drifts: readonly Drift[], opts: { max?: number; withKind?: boolean } = {}): string {
  const max = opts.max ?? 10;
  const shown = drifts.slice(0, max).map((d) => (opts.withKind ? `${d.kind} ${driftLine(d)}` : driftLine(d)));
  if (drifts.length > max) shown.push(`… and ${drifts.length - max} more`);
  return shown.join("; ");
}
