// Redirect mode, pure: the nftables tables that send each frontend's packets
// to its relay's port on this node (`redirect`, the old kube-proxy
// userspace mode's REDIRECT), and refuse those of frontends without
// endpoints (upstream's reject: TCP reset, ICMP port unreachable). One
// `nft -f -` replaces both tables whole: the rules are few (one per frontend)
// and connections already redirected keep their conntrack NAT entry.

import type { Frontend } from "./frontends.ts";
import { TABLE, tableFamilies, type TableFamily } from "./names.ts";

export interface Redirect {
  frontend: Frontend;
  /** the relay's port, listening on every address of the node */
  port: number;
}

const kw = (f: TableFamily) => (f === "ip" ? "ip" : "ip6");
const familyOf = (f: Frontend): TableFamily => (f.family === "v4" ? "ip" : "ip6");
const comment = (f: Frontend) => `comment "${f.service.replace(/[^\w./:-]/g, "_")}"`;
/** where a packet arriving from another host goes: the node IP of its family, else the interface's first address */
const arrivingTo = (fam: TableFamily, nodeIP: string | undefined, port: number) =>
  nodeIP === undefined ? `redirect to :${port}` : `dnat to ${fam === "ip6" ? `[${nodeIP}]` : nodeIP}:${port}`;
const chain = (name: string, hook: string, rules: string[]) => [`  chain ${name} {`, `    ${hook}`, ...rules.map((r) => `    ${r}`), "  }"];
const match = (f: Frontend) => `${kw(familyOf(f))} daddr ${f.ip} ${f.proto} dport ${f.port}`;

/**
 * `nodeIPs`: where packets arriving from other hosts are sent. `redirect`
 * in prerouting goes to the first address of the interface the packet came
 * in by, and a pod's veth on the node often has none (or only a link-local
 * IPv6 one): the packet is dropped. So arriving packets are DNATed to the
 * node IP of their family when there is one; locally sent ones (output
 * hook) are redirected to loopback.
 */
export function renderRedirect(redirects: readonly Redirect[], refused: readonly Frontend[], nodeIPs: readonly string[] = []): string {
  const lines: string[] = [];
  for (const fam of tableFamilies) {
    const nodeIP = nodeIPs.find((ip) => ip.includes(":") === (fam === "ip6"));
    const pre = redirects
      .filter((r) => familyOf(r.frontend) === fam)
      .map((r) => `${match(r.frontend)} ${arrivingTo(fam, nodeIP, r.port)} ${comment(r.frontend)}`);
    const nat = redirects
      .filter((r) => familyOf(r.frontend) === fam)
      .map((r) => `${match(r.frontend)} redirect to :${r.port} ${comment(r.frontend)}`);
    // node ports without endpoints need no rule: nothing listens there, the node refuses by itself
    const reject = refused
      .filter((f) => familyOf(f) === fam && f.kind !== "nodeport")
      .map((f) => `${match(f)} reject${f.proto === "tcp" ? " with tcp reset" : ""} ${comment(f)}`);
    lines.push(`table ${fam} ${TABLE}`, `delete table ${fam} ${TABLE}`, `table ${fam} ${TABLE} {`);
    lines.push(
      ...chain("prerouting", "type nat hook prerouting priority dstnat; policy accept;", pre),
      ...chain("output", "type nat hook output priority -100; policy accept;", nat), // nft 1.0.6 knows no `dstnat` name in the output hook
      ...chain("refuse-forward", "type filter hook forward priority filter; policy accept;", reject),
      ...chain("refuse-output", "type filter hook output priority filter; policy accept;", reject),
    );
    lines.push("}");
  }
  return lines.join("\n") + "\n";
}

/** `--cleanup`: both tables, whether they exist or not */
export const cleanupRedirect = () => tableFamilies.flatMap((f) => [`table ${f} ${TABLE}`, `delete table ${f} ${TABLE}`]).join("\n") + "\n";
