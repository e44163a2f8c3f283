// Pod traffic, as one family's backend rules match it (kube-proxy's
// LocalTrafficDetector, pkg/proxy/util/localdetector.go): by source CIDR
// (detectLocalMode ClusterCIDR, NodeCIDR) or by input interface
// (BridgeInterface, InterfaceNamePrefix). The backends print the match in
// their own syntax; this says only what to match.

import type { Config } from "../../core/config/config.ts";
import { cidrsOf, type Family } from "./family.ts";

export type FamilyLocalDetect =
  /** source inside one of these CIDRs of the family */
  | { kind: "cidrs"; cidrs: string[] }
  /** input interface named `name`, or (prefix) whose name starts with it */
  | { kind: "iface"; name: string; prefix: boolean };

/**
 * What tells pod traffic of `family` (undefined: nothing does, as upstream's
 * no-op detector: no CIDR of the family was given, or the Node has none).
 * Interface matches hold for both families. Config.localDetect absent =
 * ClusterCIDR from Config.clusterCIDRs.
 */
export function localDetectFor(config: Pick<Config, "clusterCIDRs" | "localDetect">, family: Family): FamilyLocalDetect | undefined {
  const d = config.localDetect ?? { kind: "cluster-cidr", cidrs: config.clusterCIDRs };
  if (d.kind === "bridge") return { kind: "iface", name: d.iface, prefix: false };
  if (d.kind === "prefix") return { kind: "iface", name: d.prefix, prefix: true };
  const cidrs = [...new Set(cidrsOf(d.cidrs, family))];
  return cidrs.length ? { kind: "cidrs", cidrs } : undefined;
}

/**
 * iptables matches for pod traffic, one per alternative (any one matching
 * means a pod), as kube-proxy's LocalTrafficDetector prints them: `-s CIDR`,
 * `-i cbr0`, `-i veth+`. None: nothing is pod traffic. Interface names were
 * checked at start-up (config/detect-local.ts): no wildcard of their own.
 */
export function iptablesLocalMatches(d: FamilyLocalDetect | undefined): string[][] {
  if (!d) return [];
  if (d.kind === "cidrs") return d.cidrs.map((c) => ["-s", c]);
  return [["-i", d.prefix ? `${d.name}+` : d.name]];
}
