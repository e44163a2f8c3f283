// The fixed chains: their content depends on Config only (masquerade bit,
// cluster CIDRs, node port addresses), so they are written by full restores
// and never by partial ones. Pure.

import { isIP } from "node:net";
import { cidrsOf, type Config, type Family, iptablesLocalMatches, ipFamily, localDetectFor } from "../../src/plugins/toolkit/index.ts";
import { chains, hairpinSets } from "./names.ts";
import type { Rule } from "./render-restore.ts";

function toBigInt(ip: string): bigint {
  if (isIP(ip) === 4) return ip.split(".").reduce((a, o) => (a << 8n) | BigInt(Number(o)), 0n);
  const [head, tail] = ip.includes("::") ? ip.split("::") : [ip, undefined];
  const h = head ? head.split(":") : [];
  const t = tail ? tail.split(":") : [];
  // An embedded IPv4 tail (::ffff:1.2.3.4) counts as two groups.
  const groups = (g: string[]) =>
    g.flatMap((x) => (x.includes(".") ? [(toBigInt(x) >> 16n).toString(16), (toBigInt(x) & 0xffffn).toString(16)] : [x]));
  const hh = groups(h);
  const tt = groups(t);
  const all = tail === undefined ? hh : [...hh, ...Array(8 - hh.length - tt.length).fill("0"), ...tt];
  return all.reduce((a, g) => (a << 16n) | BigInt(parseInt(g || "0", 16)), 0n);
}

/** Whether `ip` lies in `cidr` (same family; a plain address is a /32 or /128). */
export function prefixContains(cidr: string, ip: string): boolean {
  const [net, bitsText] = cidr.split("/");
  const fam = isIP(net);
  if (!fam || fam !== isIP(ip)) return false;
  const width = fam === 4 ? 32n : 128n;
  const bits = BigInt(bitsText ?? width);
  const shift = width - bits;
  return toBigInt(net) >> shift === toBigInt(ip) >> shift;
}

export const masqMark = (config: Config) => `0x${(1 << config.masqueradeBit).toString(16)}`;

/**
 * Where node ports answer, as match lists, for one family. kube-proxy's
 * iptables-mode rules: `nodePortAddresses` (CIDRs, or "primary" = the node
 * IPs) when set; else every local address (cmd/kube-proxy/app/server_linux.go
 * leaves it unset for iptables mode, and the proxier then matches
 * `--dst-type LOCAL`), so a node IP change needs no new rule.
 */
export function nodePortMatches(config: Config, family: Family): string[][] {
  const nodeIPs = config.nodeIPs.filter((ip) => ipFamily(ip) === family);
  const local = ["-m", "addrtype", "--dst-type", "LOCAL"];
  if (config.nodePortAddresses.length) {
    const out: string[][] = [];
    for (const a of config.nodePortAddresses) {
      if (a === "primary") out.push(...nodeIPs.map((ip) => ["-d", ip]));
      else if (cidrsOf([a], family).length) out.push(a.includes("/") ? ["-d", a, ...local] : ["-d", a]);
    }
    return out;
  }
  // Loopback is left out, as upstream does with localhostNodePorts off: kpng
  // never sets route_localnet, so a DNATed 127.0.0.1 packet would be dropped
  // as a martian (a hang) instead of refused; IPv6 has no route_localnet at all.
  return [family === "v6" ? ["!", "-d", "::1", ...local] : ["!", "-d", "127.0.0.0/8", ...local]];
}

/** Rules of the fixed chains, in chain order. `tails` go after every per-service rule of their chain. */
export interface FixedRules {
  rules: Rule[];
  tails: Rule[];
}

/** `hairpinSet`: endpoints without SEP chains are masqueraded on hairpin by the family's ipset (names.ts). */
export function renderFixed(config: Config, family: Family, opts: { hairpinSet: boolean } = { hairpinSet: true }): FixedRules {
  const mark = masqMark(config);
  const rules: Rule[] = [];
  const tails: Rule[] = [];
  const nat = (chain: string, r: Omit<Rule, "table" | "chain">) => rules.push({ table: "nat", chain, ...r });

  if (opts.hairpinSet) {
    nat(chains.postrouting, {
      comment: "hairpin: an endpoint reaching itself through a service",
      match: ["-m", "set", "--match-set", hairpinSets[family], "dst,dst,src"],
      target: ["-j", chains.markMasq],
    });
  }
  nat(chains.markMasq, { match: [], target: ["-j", "MARK", "--or-mark", mark] });
  for (const match of iptablesLocalMatches(localDetectFor(config, family)))
    nat(chains.markNonPod, { comment: "pod traffic is not masqueraded", match, target: ["-j", "RETURN"] });
  nat(chains.markNonPod, { match: [], target: ["-j", chains.markMasq] });
  nat(chains.postrouting, { match: ["-m", "mark", "!", "--mark", `${mark}/${mark}`], target: ["-j", "RETURN"] });
  // Clear the bit so a packet re-traversing the chains (e.g. IPsec) is not masqueraded twice.
  nat(chains.postrouting, { match: [], target: ["-j", "MARK", "--xor-mark", mark] });
  nat(chains.postrouting, { comment: "kpng service traffic requiring SNAT", match: [], target: ["-j", "MASQUERADE", "--random-fully"] });

  rules.push({
    table: "filter",
    chain: chains.forward,
    comment: "kpng forwarding rules",
    match: ["-m", "mark", "--mark", `${mark}/${mark}`],
    target: ["-j", "ACCEPT"],
  });
  rules.push({
    table: "filter",
    chain: chains.forward,
    comment: "kpng forwarding conntrack rule",
    match: ["-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED"],
    target: ["-j", "ACCEPT"],
  });

  for (const m of nodePortMatches(config, family)) {
    tails.push({
      table: "nat",
      chain: chains.services,
      comment: "kpng service nodeports; must be the last rule in this chain",
      match: m,
      target: ["-j", chains.nodePorts],
    });
    tails.push({
      table: "filter",
      chain: chains.externalServices,
      comment: "kpng service nodeports; must be the last rule in this chain",
      match: m,
      target: ["-j", chains.filterNodePorts],
    });
  }
  return { rules, tails };
}
