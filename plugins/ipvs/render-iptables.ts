// The few iptables rules IPVS mode needs, as data printed once into an
// `iptables-restore --noflush` input. They never name a service: they match
// the ipsets, so a sync only changes set entries and these rules are written
// again only on a full sync (declaring a chain in a --noflush restore flushes
// it, which makes the rewrite idempotent).

import { type Config, type Family, iptablesLocalMatches, localDetectFor } from "../../src/host/toolkit/index.ts";
import { type BaseJump, chains, setName } from "./names.ts";

export interface Rule {
  table: "nat" | "filter";
  chain: string;
  /** match arguments, already split */
  match: string[];
  /** -j target and its options */
  target: string[];
  comment?: string;
}

export interface IptablesContext extends Pick<Config, "clusterCIDRs" | "localDetect"> {
  masqueradeAll: boolean;
  masqueradeBit: number;
}

export function masqueradeMark(bit: number): string {
  const hex = `0x${(1 << bit).toString(16)}`;
  return hex;
}

/** The rules for one family, in chain order. */
export function iptablesRules(family: Family, ctx: IptablesContext): Rule[] {
  const set = (id: Parameters<typeof setName>[0], dirs: string, negate = false) => [
    "-m",
    "set",
    ...(negate ? ["!"] : []),
    "--match-set",
    setName(id, family),
    dirs,
  ];
  const mark = masqueradeMark(ctx.masqueradeBit);
  const rules: Rule[] = [];
  const nat = (chain: string, match: string[], target: string[], comment?: string) =>
    rules.push({ table: "nat", chain, match, target, comment });
  const filter = (chain: string, match: string[], target: string[], comment?: string) =>
    rules.push({ table: "filter", chain, match, target, comment });
  const toMasq = [chains.markMasq];

  nat(chains.markMasq, [], ["MARK", "--or-mark", mark]);
  nat(chains.postrouting, set("loopBack", "dst,dst,src"), ["MASQUERADE"], "hairpin: a pod reached itself through a service");
  nat(chains.postrouting, ["-m", "mark", "!", "--mark", `${mark}/${mark}`], ["RETURN"]);
  // Clear the bit so a packet re-entering the stack (e.g. after IPsec) is not masqueraded twice.
  nat(chains.postrouting, [], ["MARK", "--xor-mark", mark]);
  nat(chains.postrouting, [], ["MASQUERADE"], "service traffic requiring SNAT");

  // pod traffic as detectLocalMode says (source CIDR or input interface)
  const pods = iptablesLocalMatches(localDetectFor(ctx, family));
  if (ctx.masqueradeAll) {
    nat(chains.services, set("clusterIP", "dst,dst"), toMasq, "cluster IP: masquerade all");
  } else if (pods.length) {
    // Pods keep their source; anything else (the node, other hosts) is masqueraded.
    for (const m of pods) nat(chains.services, [...m, ...set("clusterIP", "dst,dst")], ["RETURN"], "cluster IP from pods");
    nat(chains.services, set("clusterIP", "dst,dst"), toMasq, "cluster IP from outside the pod network");
  }
  nat(chains.services, set("externalIP", "dst,dst"), toMasq, "external IP");
  nat(chains.services, set("loadBalancer", "dst,dst"), toMasq, "load balancer IP");
  nat(chains.services, set("nodePort", "dst,dst"), toMasq, "node port");

  // filter INPUT runs before IPVS's LOCAL_IN hook (priority 0 < NF_IP_PRI_NAT_SRC-2), so these see the packet first.
  filter(
    chains.filter,
    [...set("loadBalancerFW", "dst,dst"), ...set("loadBalancerSourceCIDR", "dst,dst,src", true)],
    ["DROP"],
    "loadBalancerSourceRanges: source not allowed",
  );
  const fresh = ["-m", "conntrack", "--ctstate", "NEW"];
  filter(chains.filter, [...fresh, ...set("drop", "dst,dst")], ["DROP"], "Local traffic policy without local endpoints");
  filter(chains.filter, [...fresh, ...set("reject", "dst,dst")], ["REJECT"], "service has no endpoints");
  filter(chains.forward, ["-m", "mark", "--mark", `${mark}/${mark}`], ["ACCEPT"], "masqueraded service traffic");
  filter(chains.forward, ["-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED"], ["ACCEPT"], "service traffic replies");
  return rules;
}

const quote = (s: string) => `"${s}"`;

export function ruleArgs(r: Pick<Rule, "match" | "target" | "comment">): string[] {
  const comment = r.comment ? ["-m", "comment", "--comment", r.comment] : [];
  return [...comment, ...r.match, "-j", ...r.target];
}

const printArgs = (args: string[]) => args.map((a) => (/\s/.test(a) ? quote(a) : a)).join(" ");

/** `iptables-restore --noflush` input: every chain of ours declared (so flushed), then its rules. */
export function printIptablesRestore(rules: readonly Rule[]): string {
  let out = "";
  for (const table of ["nat", "filter"] as const) {
    const own = Object.values(chains).filter((c) => rules.some((r) => r.table === table && r.chain === c));
    out += `*${table}\n`;
    for (const c of own) out += `:${c} - [0:0]\n`;
    for (const r of rules) if (r.table === table) out += `-A ${r.chain} ${printArgs(ruleArgs(r))}\n`;
    out += "COMMIT\n";
  }
  return out;
}

/** argv of `iptables -C|-I|-D` for one base-chain jump. */
export function jumpArgv(family: Family, op: "-C" | "-I" | "-D", j: BaseJump): string[] {
  return [
    family === "v4" ? "iptables" : "ip6tables",
    "-w",
    "-t",
    j.table,
    op,
    j.chain,
    ...ruleArgs({ match: [], target: [j.target], comment: j.comment }),
  ];
}

export const restoreArgv = (family: Family) => [family === "v4" ? "iptables-restore" : "ip6tables-restore", "-w", "--noflush"];
