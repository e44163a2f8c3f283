// Which families this node proxies and which of its addresses answer node
// ports, from Config only (never a hard-coded address).

import { BlockList } from "node:net";
import type { Config } from "../../src/core/config/config.ts";
import { familyOf } from "./model.ts";
import type { Family } from "./names.ts";

const addressPart = (s: string) => s.split("/")[0] ?? s;

/** The families named by the node's configuration; IPv4 when it names none. */
export function familiesOf(config: Pick<Config, "nodeIPs" | "clusterCIDRs" | "nodePortAddresses">): Set<Family> {
  const out = new Set<Family>();
  for (const a of [...config.nodeIPs, ...config.clusterCIDRs, ...config.nodePortAddresses]) {
    if (a !== "primary") out.add(familyOf(addressPart(a)));
  }
  if (!out.size) out.add(4);
  return out;
}

/** nodePortAddresses lists CIDRs: the node's interface addresses must be read to match them. */
export const needsInterfaceAddresses = (config: Pick<Config, "nodePortAddresses">) =>
  config.nodePortAddresses.some((a) => a !== "primary");

/**
 * Addresses node ports answer on (kube-proxy's --nodeport-addresses): empty or
 * "primary" = the node IPs; a CIDR = every interface address inside it.
 */
export function nodePortIPs(config: Pick<Config, "nodeIPs" | "nodePortAddresses">, interfaceAddrs: readonly string[] = []): string[] {
  if (!config.nodePortAddresses.length) return [...config.nodeIPs];
  const out = new Set<string>();
  const cidrs = new BlockList();
  for (const a of config.nodePortAddresses) {
    if (a === "primary") {
      for (const ip of config.nodeIPs) out.add(ip);
      continue;
    }
    const [net, bits] = a.split("/");
    const fam = familyOf(net!);
    cidrs.addSubnet(net!, Number(bits ?? (fam === 4 ? 32 : 128)), fam === 4 ? "ipv4" : "ipv6");
  }
  for (const ip of interfaceAddrs) if (cidrs.check(ip, familyOf(ip) === 4 ? "ipv4" : "ipv6")) out.add(ip);
  return [...out];
}
