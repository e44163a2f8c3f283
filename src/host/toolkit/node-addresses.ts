// This node's addresses as backends use them: the node IPs to render with,
// which families the node proxies and which of its addresses answer node
// ports, from the state and Config only (never a hard-coded address).

import { BlockList } from "node:net";
import type { Config } from "../../core/config/config.ts";
import type { NodeState } from "../../core/brain/state.ts";
import { sameIPs } from "../../core/brain/node-ips.ts";
import { familyOf, type Family } from "./family.ts";

export { sameIPs };

/**
 * The node's IPs to render with: the state's (the brain keeps them current),
 * else Config.nodeIPs (a sidecar's --node-ip: the localv1 wire has none).
 */
export const nodeIPsOf = (state: NodeState, config: Config): readonly string[] => state.nodeIPs ?? config.nodeIPs;

const addressPart = (s: string) => s.split("/")[0] ?? s;

/** The families named by the node's configuration; IPv4 when it names none. */
export function familiesOf(config: Pick<Config, "nodeIPs" | "clusterCIDRs" | "nodePortAddresses">): Set<Family> {
  const out = new Set<Family>();
  for (const a of [...config.nodeIPs, ...config.clusterCIDRs, ...config.nodePortAddresses]) {
    if (a !== "primary") out.add(familyOf(addressPart(a)));
  }
  if (!out.size) out.add("v4");
  return out;
}

/** nodePortAddresses lists CIDRs: the node's interface addresses must be read to match them. */
export const needsInterfaceAddresses = (config: Pick<Config, "nodePortAddresses">) => config.nodePortAddresses.some((a) => a !== "primary");

/**
 * Addresses node ports answer on (kube-proxy's --nodeport-addresses): empty or
 * "primary" = the node IPs; a CIDR = every interface address inside it.
 */
export function nodePortIPs(config: Pick<Config, "nodeIPs" | "nodePortAddresses">, interfaceAddrs: readonly string[] = []): string[] {
  if (!config.nodePortAddresses.length) return [...config.nodeIPs];
  const out = new Set<string>();
  const cidrs = new BlockList();
  const type = (ip: string) => (familyOf(ip) === "v4" ? "ipv4" : "ipv6");
  for (const a of config.nodePortAddresses) {
    if (a === "primary") {
      for (const ip of config.nodeIPs) out.add(ip);
      continue;
    }
    const [net, bits] = a.split("/");
    cidrs.addSubnet(net!, Number(bits ?? (familyOf(net!) === "v4" ? 32 : 128)), type(net!));
  }
  for (const ip of interfaceAddrs) if (cidrs.check(ip, type(ip))) out.add(ip);
  return [...out];
}

interface IpAddrLink {
  ifname?: string;
  addr_info?: { local?: string; scope?: string }[];
}

/** This host's addresses from `ip -j addr show`, optionally leaving out one interface; link-local ones never answer node ports. */
export function parseIpAddrJson(text: string, opts: { exclude?: string } = {}): string[] {
  const links = (text.trim() ? JSON.parse(text) : []) as IpAddrLink[];
  const out: string[] = [];
  for (const l of links) {
    if (l.ifname === opts.exclude) continue;
    for (const a of l.addr_info ?? []) if (a.local && a.scope !== "link") out.push(a.local);
  }
  return out;
}
