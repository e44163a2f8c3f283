// What to remove, computed from a listing of the node: pure, text in and
// data out. The executor (index.ts) lists the node, hands the listing here and
// runs the plan; tests hand in listings of kube-proxy's shapes.
//
// One rule keeps other software safe beyond the names (footprint.ts): a chain
// of ours that a chain of someone else still jumps to is kept, whole, with the
// chains it reaches (deleting it would fail the table's restore, and flushing
// it would change what that other rule does).

import { parseIpvsSave } from "../../../plugins/ipvs/parse.ts";
import { serviceFlag } from "../../../plugins/ipvs/print.ts";
import { setName } from "../../../plugins/ipvs/names.ts";
import { printRestore, Transaction } from "../../../plugins/iptables/render-restore.ts";
import { FAMILIES, parseIpAddrJson, type Family } from "../toolkit/index.ts";
import { BUILTIN_CHAINS, IPVS_DEVICE, NFT_TABLES, NODE_PORT_SETS, ownsChain, ownsIpset, type IptTable, type Owner } from "./footprint.ts";

export type Flavour = "legacy" | "nft";

export interface IptablesDump {
  flavour: Flavour;
  family: Family;
  /** `iptables-<flavour>-save` output */
  save: string;
}

/** Everything the sweep reads, each as its tool prints it ("" or absent where the tool is missing or has nothing). */
export interface Listing {
  /** `nft list tables` */
  nftTables: string;
  iptables: IptablesDump[];
  /** `ipset save` */
  ipsets: string;
  /** `ip -j -d link show kube-ipvs0`; "" when there is no such device */
  device: string;
  /** `ip -j addr show dev kube-ipvs0` */
  deviceAddrs: string;
  /** `ipvsadm -Sn`; "" without IPVS */
  ipvs: string;
}

export interface PlanOptions {
  /** whose rules go */
  owners: readonly Owner[];
  /** kpng runs its IPVS backend: kube-ipvs0 and the virtual servers are kpng's now (its first full sync took them over) */
  keepIpvs?: boolean;
}

export interface RestoreStep {
  flavour: Flavour;
  family: Family;
  /** `iptables-restore --noflush` input: one atomic transaction per table */
  input: string;
}

export interface Plan {
  /** `nft -f -` input deleting whole tables, one transaction; "" = nothing */
  nft: string;
  iptables: RestoreStep[];
  /** `ipvsadm -R` input deleting virtual servers; "" = nothing */
  ipvs: string;
  /** delete the kube-ipvs0 dummy device */
  deleteDevice: boolean;
  /** ipsets to destroy, after the iptables rules that match them are gone */
  ipsets: string[];
  /** one line per thing removed, for the log */
  removed: string[];
  /** one line per thing of an owner's that stays, and why */
  kept: string[];
}

export const emptyPlan = (plan: Plan) => !plan.nft && !plan.iptables.length && !plan.ipvs && !plan.deleteDevice && !plan.ipsets.length;

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

/** The restore input removing the owners' chains of one dump, and what it removes or keeps. */
export function planIptables(dump: IptablesDump, owners: readonly Owner[]): { input: string; removed: string[]; kept: string[] } {
  const tx = new Transaction();
  const removed: string[] = [];
  const kept: string[] = [];
  const where = `iptables-${dump.flavour} ${dump.family}`;
  for (const [table, saved] of parseIptablesSave(dump.save)) {
    const owned = new Set(saved.chains.filter((c) => owners.some((o) => ownsChain(o, table, c))));
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

const summarize = (names: string[]) => (names.length <= 4 ? names.join(" ") : `${names.slice(0, 4).join(" ")} …`);

/** `ipset save` -> set name -> members */
export function parseIpsets(text: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const line of text.split("\n")) {
    const [verb, name, member] = line.trim().split(/\s+/);
    if (verb === "create" && name) out.set(name, out.get(name) ?? []);
    else if (verb === "add" && name && member) out.get(name)?.push(member);
  }
  return out;
}

/**
 * The virtual servers of the owners' IPVS modes: those on an address of
 * kube-ipvs0 (cluster, external and load-balancer IPs, both kube-proxy's and
 * kpng's), and the node-port ones, whose ports kube-proxy keeps in its
 * KUBE-NODE-PORT-* sets and kpng in KPNG-NODE-PORT as ip,proto:port. Other
 * virtual servers (keepalived's, an operator's) stay; kube-proxy's own cleanup
 * flushes them all.
 */
function planIpvs(listing: Listing, sets: Map<string, string[]>, owners: readonly Owner[]): { input: string; count: number } {
  const onDevice = new Set(parseIpAddrJson(listing.deviceAddrs));
  const nodePorts = new Set<string>();
  if (owners.includes("kube-proxy"))
    for (const proto of ["tcp", "udp"] as const)
      for (const set of NODE_PORT_SETS[proto]) for (const port of sets.get(set) ?? []) nodePorts.add(`${proto} ${port}`);
  const kpngNodePorts = new Set<string>();
  if (owners.includes("kpng")) for (const f of FAMILIES) for (const e of sets.get(setName("nodePort", f)) ?? []) kpngNodePorts.add(e);
  let input = "";
  let count = 0;
  for (const { vs } of parseIpvsSave(listing.ipvs).values()) {
    const ours = onDevice.has(vs.ip) || nodePorts.has(`${vs.proto} ${vs.port}`) || kpngNodePorts.has(`${vs.ip},${vs.proto}:${vs.port}`);
    if (!ours) continue;
    input += `-D ${serviceFlag(vs)}\n`;
    count++;
  }
  return { input, count };
}

interface LinkInfo {
  ifname?: string;
  linkinfo?: { info_kind?: string };
}

const deviceKind = (text: string): string | undefined => {
  if (!text.trim()) return undefined;
  const links = JSON.parse(text) as LinkInfo[];
  return links[0] ? (links[0].linkinfo?.info_kind ?? "device") : undefined;
};

/** What to remove so that nothing of the owners' rules is left, and nothing of anyone else's is touched. */
export function planLeftovers(listing: Listing, opts: PlanOptions): Plan {
  const { owners } = opts;
  const removed: string[] = [];
  const kept: string[] = [];

  const tables = new Set(listing.nftTables.split("\n").map((l) => l.trim()));
  let nft = "";
  for (const o of owners)
    for (const t of NFT_TABLES[o]) {
      if (!tables.has(`table ${t.family} ${t.name}`)) continue;
      nft += `delete table ${t.family} ${t.name}\n`;
      removed.push(`nftables table ${t.family} ${t.name}`);
    }

  const iptables: RestoreStep[] = [];
  for (const dump of listing.iptables) {
    const p = planIptables(dump, owners);
    removed.push(...p.removed);
    kept.push(...p.kept);
    if (p.input) iptables.push({ flavour: dump.flavour, family: dump.family, input: p.input });
  }

  const sets = parseIpsets(listing.ipsets);
  let ipvs = "";
  let deleteDevice = false;
  if (opts.keepIpvs) {
    if (listing.device.trim()) kept.push(`${IPVS_DEVICE} and its virtual servers: kpng's IPVS backend uses them`);
  } else {
    const v = planIpvs(listing, sets, owners);
    ipvs = v.input;
    if (v.count) removed.push(`${v.count} IPVS virtual servers`);
    const kind = deviceKind(listing.device);
    if (kind === "dummy") {
      deleteDevice = true;
      removed.push(`device ${IPVS_DEVICE}`);
    } else if (kind) kept.push(`device ${IPVS_DEVICE}: a ${kind} device, not IPVS mode's dummy`);
  }

  const ipsets = [...sets.keys()].filter((n) => owners.some((o) => ownsIpset(o, n)));
  if (ipsets.length) removed.push(`${ipsets.length} ipsets (${summarize(ipsets)})`);
  return { nft, iptables, ipvs, deleteDevice, ipsets, removed, kept };
}
