// What this backend leaves behind on a node, and what kube-proxy's iptables
// mode leaves: the chains each owns, as data, and the restore input that
// removes them. The host's leftovers sweep (src/host/leftovers/) asks
// through index.ts; it plans, this file knows iptables.
//
// Facts from kube-proxy's own cleanup (cmd/kube-proxy/app/server_linux.go
// platformCleanup; pkg/proxy/iptables CleanupLeftovers). kube-proxy's IPVS
// mode's chains are the IPVS backend's to name (plugins/ipvs/leftovers.ts).

import { prefix } from "./names.ts";
import { printRestore, Transaction } from "./render-restore.ts";

export type IptTable = "filter" | "nat" | "mangle";

/** Whose chains and ipsets: kpng's (every backend's are KPNG-) or kube-proxy's iptables mode's. */
export interface IptablesFootprint {
  ownsChain(table: IptTable, chain: string): boolean;
  ownsIpset(name: string): boolean;
}

/** The built-in chains of filter, nat and mangle: jumps from them into an owner's chain are that owner's. */
export const BUILTIN_CHAINS: ReadonlySet<string> = new Set(["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]);

/**
 * The chain kube-proxy's iptables and IPVS modes create at start-up in
 * mangle, nat and filter of both families, and watch (pkg/util/iptables
 * Monitor): their rules are flushed when it goes. Its mangle copy is the one
 * to look for: that table is small.
 */
export const KUBE_PROXY_CANARY = "KUBE-PROXY-CANARY";

/**
 * kube-proxy's iptables-mode chains per table (its IPVS mode shares
 * KUBE-SERVICES, KUBE-POSTROUTING, KUBE-MARK-MASQ, KUBE-FORWARD and
 * KUBE-PROXY-FIREWALL). KUBE-MARK-DROP is left out, as kube-proxy's cleanup
 * leaves it: kubelet created it too.
 */
const KUBE_PROXY_CHAINS: Readonly<Record<IptTable, ReadonlySet<string>>> = {
  nat: new Set(["KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING", "KUBE-MARK-MASQ", KUBE_PROXY_CANARY]),
  filter: new Set(["KUBE-SERVICES", "KUBE-EXTERNAL-SERVICES", "KUBE-FORWARD", "KUBE-NODEPORTS", "KUBE-PROXY-FIREWALL", KUBE_PROXY_CANARY]),
  mangle: new Set([KUBE_PROXY_CANARY]),
};

/** kube-proxy's per-service and per-endpoint chains (iptables mode, nat); KUBE-XLB- is the name before 1.24. */
const KUBE_PROXY_SERVICE_CHAIN_PREFIXES = ["KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-", "KUBE-XLB-"];

/**
 * kpng's: every chain and ipset of its iptables and IPVS backends is KPNG-
 * (names.ts); kube-proxy's iptables mode: the chains above, and no ipset.
 */
export const IPTABLES_FOOTPRINT: Readonly<Record<"kpng" | "kube-proxy", IptablesFootprint>> = {
  kpng: {
    ownsChain: (_table, chain) => chain.startsWith(prefix),
    ownsIpset: (name) => name.startsWith(prefix),
  },
  "kube-proxy": {
    ownsChain: (table, chain) =>
      KUBE_PROXY_CHAINS[table].has(chain) || (table === "nat" && KUBE_PROXY_SERVICE_CHAIN_PREFIXES.some((p) => chain.startsWith(p))),
    ownsIpset: () => false,
  },
};

const TABLES: readonly IptTable[] = ["mangle", "filter", "nat"];

interface SavedTable {
  chains: string[];
  /** rules of the built-in chains that jump to a user chain, as iptables-save prints them (`-A ...`: deletable as is) */
  builtinJumps: Array<{ chain: string; target: string; line: string }>;
  /** user chain -> the user chains its rules jump to */
  edges: Map<string, string[]>;
}

/**
 * iptables-save text -> its filter, nat and mangle tables (others are never
 * ours). Keeps only jumps between chains: at scale kube-proxy's text holds
 * hundreds of thousands of rules, most of which only DNAT or mark.
 */
export function parseIptablesSave(text: string): Map<IptTable, SavedTable> {
  const out = new Map<IptTable, SavedTable>();
  let current: SavedTable | undefined;
  let declared = new Set<string>();
  for (const line of text.split("\n")) {
    if (line.startsWith("*")) {
      const t = line.slice(1).trimEnd() as IptTable;
      current = TABLES.includes(t) ? { chains: [], builtinJumps: [], edges: new Map() } : undefined;
      declared = new Set();
      if (current) out.set(t, current);
    } else if (!current) continue;
    else if (line.startsWith(":")) {
      const name = line.slice(1, line.indexOf(" ") >>> 0);
      current.chains.push(name);
      declared.add(name);
    } else if (line.startsWith("-A ")) {
      // iptables-save declares every chain before the first rule
      const target = / -[jg] (\S+)/.exec(line)?.[1];
      if (!target || !declared.has(target) || BUILTIN_CHAINS.has(target)) continue;
      const chain = line.slice(3, line.indexOf(" ", 3));
      if (BUILTIN_CHAINS.has(chain)) current.builtinJumps.push({ chain, target, line: line.trimEnd() });
      const list = current.edges.get(chain);
      if (list) list.push(target);
      else current.edges.set(chain, [target]);
    }
  }
  return out;
}

/** The first four names of a list, `…` after them when there are more: what a "removed" line shows. */
export const summarize = (names: string[]) => (names.length <= 4 ? names.join(" ") : `${names.slice(0, 4).join(" ")} …`);

/**
 * The `iptables-restore --noflush` input removing the chains `owns` claims
 * from one iptables-save text, and what it removes or keeps (each line
 * starting with `where`). A chain claimed that another program's chain still
 * jumps to is kept, whole, with the chains it reaches: deleting it would fail
 * the table's restore, and flushing it would change what that other rule does.
 */
export function restoreRemovingChains(
  save: string,
  owns: (table: IptTable, chain: string) => boolean,
  where: string,
): { input: string; removed: string[]; kept: string[] } {
  const tx = new Transaction();
  const removed: string[] = [];
  const kept: string[] = [];
  for (const [table, saved] of parseIptablesSave(save)) {
    const owned = new Set(saved.chains.filter((c) => owns(table, c)));
    if (!owned.size) continue;
    // Chains of ours that another program's chain jumps to stay, with all they reach.
    const keep = new Set<string>();
    const pending: string[] = [];
    for (const [chain, targets] of saved.edges)
      if (!owned.has(chain) && !BUILTIN_CHAINS.has(chain)) pending.push(...targets.filter((t) => owned.has(t)));
    for (let c = pending.pop(); c !== undefined; c = pending.pop()) {
      if (keep.has(c)) continue;
      keep.add(c);
      for (const t of saved.edges.get(c) ?? []) if (owned.has(t)) pending.push(t);
    }
    const gone = [...owned].filter((c) => !keep.has(c));
    const jumps = saved.builtinJumps.filter((r) => owned.has(r.target) && !keep.has(r.target));
    for (const j of jumps) tx.removeSaved(table, j.line);
    for (const c of gone) {
      tx.declare(table, c);
      tx.deleteChain(table, c);
    }
    if (gone.length)
      removed.push(`${where} ${table}: ${gone.length} chains (${summarize(gone)}), ${jumps.length} jumps from built-in chains`);
    for (const c of keep) kept.push(`${where} ${table} ${c}: another program's chain still reaches it`);
  }
  if (tx.error) throw new Error(`${where}: ${tx.error}`);
  return { input: printRestore(tx), removed, kept };
}
