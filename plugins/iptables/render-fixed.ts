// The fixed chains: their content depends on Config only (masquerade bit,
// cluster CIDRs, node port addresses), so they are written by full restores
// and never by partial ones. Pure.

import { isIP } from "node:net";
import { cidrsOf, type Config, type Family, iptablesLocalMatches, ipFamily, localDetectFor } from "../../src/host/toolkit/index.ts";
import { type BaseJump, chains, hairpinSets, localnetGuardJumps, type Table } from "./names.ts";
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

const LOOPBACK4 = "127.0.0.0/8";
const netOf = (cidr: string) => cidr.split("/")[0] ?? cidr;
const isZeroCIDR = (cidr: string) => cidr.endsWith("/0");

/** A nodePortAddresses CIDR of loopback addresses only (127.0.0.0/8 or inside it, ::1). */
const withinLoopback = (cidr: string) => prefixContains(LOOPBACK4, netOf(cidr)) || netOf(cidr) === "::1";

/**
 * kube-proxy's NodePortAddresses.ContainsIPv4Loopback: nodePortAddresses
 * unset (every local address), or an IPv4 CIDR whose network is loopback or
 * that holds 127.0.0.0. "primary" never does.
 */
export function allowsIPv4Loopback(config: Config): boolean {
  if (!config.nodePortAddresses.length) return true;
  return config.nodePortAddresses.some(
    (a) => a !== "primary" && isIP(netOf(a)) === 4 && (prefixContains(LOOPBACK4, netOf(a)) || prefixContains(a, "127.0.0.0")),
  );
}

/**
 * Whether IPv4 node ports answer on 127.0.0.1 (upstream iptables mode:
 * iptables.localhostNodePorts, and nodePortAddresses that let loopback in).
 * It needs route_localnet=1 (backend.ts sets it) and the guard rule below.
 * A Config without the kube-proxy document (`iptables` absent) has it off.
 */
export const localhostNodePorts = (config: Config): boolean => (config.iptables?.localhostNodePorts ?? false) && allowsIPv4Loopback(config);

/**
 * What kube-proxy logs when nodePortAddresses names loopback addresses it
 * will not serve: on IPv6 never, on IPv4 when localhostNodePorts is off.
 */
export function loopbackRefusals(config: Config): string[] {
  const out: string[] = [];
  for (const a of config.nodePortAddresses) {
    if (a === "primary" || !withinLoopback(a)) continue;
    if (isIP(netOf(a)) === 6) out.push(`--nodeport-addresses includes localhost (${a}) but localhost NodePorts are not supported on IPv6`);
    else if (!localhostNodePorts(config))
      out.push(`--nodeport-addresses includes localhost (${a}) but --iptables-localhost-nodeports=false was passed`);
  }
  return out;
}

/**
 * Where node ports answer, as match lists, for one family. kube-proxy's
 * iptables-mode rules: `nodePortAddresses` (CIDRs, or "primary" = the node
 * IPs) when set; else every local address (cmd/kube-proxy/app/server_linux.go
 * leaves it unset for iptables mode, and the proxier then matches
 * `--dst-type LOCAL`), so a node IP change needs no new rule. Loopback
 * answers only with localhostNodePorts (IPv4): without route_localnet a
 * DNATed 127.0.0.1 packet would be dropped as a martian (a hang) instead of
 * refused, and IPv6 has no route_localnet at all.
 */
export function nodePortMatches(config: Config, family: Family): string[][] {
  const nodeIPs = config.nodeIPs.filter((ip) => ipFamily(ip) === family);
  const local = ["-m", "addrtype", "--dst-type", "LOCAL"];
  const loopbackOK = family === "v4" && localhostNodePorts(config);
  const allLocal = loopbackOK ? local : [...(family === "v6" ? ["!", "-d", "::1"] : ["!", "-d", LOOPBACK4]), ...local];
  if (config.nodePortAddresses.length) {
    const out: string[][] = [];
    for (const a of config.nodePortAddresses) {
      if (a === "primary") out.push(...nodeIPs.map((ip) => ["-d", ip]));
      else if (!cidrsOf([a], family).length || (!loopbackOK && withinLoopback(a)))
        continue; // loopbackRefusals names the latter
      else if (isZeroCIDR(a)) out.push(allLocal);
      else out.push(a.includes("/") ? ["-d", a, ...local] : ["-d", a]);
    }
    return out;
  }
  return [allLocal];
}

/** Rules of the fixed chains, in chain order. `tails` go after every per-service rule of their chain. */
export interface FixedRules {
  rules: Rule[];
  tails: Rule[];
  /** chains that exist only with some settings (beside names.ts fixedChains), and their jumps from built-in chains */
  chains: { table: Table; name: string }[];
  jumps: readonly BaseJump[];
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
  const guarded = family === "v4" && localhostNodePorts(config);
  if (guarded) {
    // route_localnet=1 also accepts 127.0.0.0/8 destinations arriving from
    // other hosts; upstream drops them unless conntrack says they belong to
    // a connection or were DNATed (a node port). Its rule, in a chain of kpng's.
    rules.push({
      table: "filter",
      chain: chains.localnetGuard,
      comment: "block incoming localnet connections",
      match: ["-d", LOOPBACK4, "!", "-s", LOOPBACK4, "-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED,DNAT"],
      target: ["-j", "DROP"],
    });
  }
  return {
    rules,
    tails,
    chains: guarded ? [{ table: "filter", name: chains.localnetGuard }] : [],
    jumps: guarded ? localnetGuardJumps : [],
  };
}
