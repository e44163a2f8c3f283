// The node's own IPs, as upstream kube-proxy defines them. Pure.
//
// Upstream (pkg/util/node GetNodeHostIPs, cmd/kube-proxy/app/server.go
// detectNodeIPs): the Node's addresses sorted InternalIP first, then
// ExternalIP; the first one is the primary IP, and the first one of the other
// family (if any) the secondary. An operator's override (--bind-address /
// --node-ip, nodeIPOverride) replaces the Node's IP of its family; kpng's
// override may name both families.
//
// Node ports (nft "primary", the default), health-check node ports, iptables'
// LoadBalancer source-range exception and winkernel's source VIP read them
// from the node-local state (NodeState.nodeIPs), never from anywhere else.

import type { K8sNode } from "./k8s/objects.ts";
import { ipFamily } from "../net/ip.ts";
import { parseIPSloppy } from "./k8s/ip-sloppy.ts";

/** upstream GetNodeHostIPs: InternalIPs before ExternalIPs; the first, then the first of the other family */
export function nodeHostIPs(node: Pick<K8sNode, "status"> | undefined): string[] {
  const addrs = node?.status?.addresses ?? [];
  // parsed as upstream parses them (ParseIPSloppy: leading zeros are decimal), written as Go prints them
  const sorted: string[] = [];
  for (const a of [...addrs.filter((a) => a.type === "InternalIP"), ...addrs.filter((a) => a.type === "ExternalIP")]) {
    const ip = parseIPSloppy(a.address);
    if (ip) sorted.push(ip);
  }
  if (!sorted.length) return [];
  const primary = sorted[0];
  const secondary = sorted.find((ip) => ipFamily(ip) !== ipFamily(primary));
  return secondary ? [primary, secondary] : [primary];
}

/**
 * The node's IPs: primary first, at most one per family. `override` (the
 * operator's, validated IPs) wins for its families and sets the primary
 * family; the Node fills the families it does not name.
 */
export function nodeIPs(node: Pick<K8sNode, "status"> | undefined, override: readonly string[] = []): string[] {
  const fromNode = nodeHostIPs(node);
  const out: string[] = [];
  for (const ip of [...override, ...fromNode]) {
    if (ipFamily(ip) === null || out.some((o) => ipFamily(o) === ipFamily(ip))) continue;
    out.push(ip);
  }
  return out;
}

export const sameIPs = (a: readonly string[] | undefined, b: readonly string[] | undefined) =>
  a === b || (!!a && !!b && a.length === b.length && a.every((ip, i) => ip === b[i]));
