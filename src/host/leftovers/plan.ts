// What to remove, computed from a listing of the node: pure, text in and
// data out. The executor (index.ts) lists the node, hands the listing here and
// runs the plan; tests hand in listings of kube-proxy's shapes. Each tool's
// text is read by the backend that speaks it (through its index.ts): the
// iptables backend writes the restore removing chains, the IPVS backend the
// ipvsadm input removing virtual servers; who owns what is footprint.ts.
//
// One rule keeps other software safe beyond the names: a chain of ours that
// a chain of someone else still jumps to is kept, whole, with the chains it
// reaches (deleting it would fail the table's restore, and flushing it would
// change what that other rule does).

import { parseIptablesSave, restoreRemovingChains, summarize } from "../../../plugins/iptables/index.ts";
import { virtualServersRemoving } from "../../../plugins/ipvs/index.ts";
import type { Family } from "../toolkit/index.ts";
import { IPVS_DEVICE, NFT_TABLES, ownsChain, ownsIpset, type Owner } from "./footprint.ts";

export { parseIptablesSave };

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

/** The restore input removing the owners' chains of one dump, and what it removes or keeps. */
export function planIptables(dump: IptablesDump, owners: readonly Owner[]): { input: string; removed: string[]; kept: string[] } {
  return restoreRemovingChains(
    dump.save,
    (table, c) => owners.some((o) => ownsChain(o, table, c)),
    `iptables-${dump.flavour} ${dump.family}`,
  );
}

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
    const v = virtualServersRemoving({ ipvs: listing.ipvs, deviceAddrs: listing.deviceAddrs, sets }, owners);
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
