// Who owns what on a node: kpng's names and kube-proxy 1.36's in each of its
// modes, asked of the backends (each one's index.ts exports what it, and
// kube-proxy's same mode, leave behind). Everything the leftovers sweep
// removes is named there; anything else (kubelet's KUBE-FIREWALL,
// KUBE-KUBELET-CANARY and KUBE-IPTABLES-HINT, kube-router's KUBE-ROUTER-*
// chains and KUBE-SRC-/KUBE-DST- ipsets, a CNI's chains) is never touched,
// which is why no rule is "everything named KUBE-*".

import { IPTABLES_FOOTPRINT, type IptTable } from "../../../plugins/iptables/index.ts";
import { IPVS_FOOTPRINT } from "../../../plugins/ipvs/index.ts";
import { NFT_FOOTPRINT, type NftTableName } from "../../../plugins/nft/index.ts";

export { BUILTIN_CHAINS, KUBE_PROXY_CANARY, type IptTable } from "../../../plugins/iptables/index.ts";
export { IPVS_DEVICE } from "../../../plugins/ipvs/index.ts";

export type Owner = "kube-proxy" | "kpng";

/** iptables chains and ipsets are written by the iptables and IPVS modes (kube-proxy's and kpng's backends alike). */
const IPTABLES_WRITERS = [IPTABLES_FOOTPRINT, IPVS_FOOTPRINT] as const;

/** Whether `owner` created this chain of `table`. */
export const ownsChain = (owner: Owner, table: IptTable, chain: string): boolean =>
  IPTABLES_WRITERS.some((f) => f[owner].ownsChain(table, chain));

/** Whether `owner` created this ipset. */
export const ownsIpset = (owner: Owner, name: string): boolean => IPTABLES_WRITERS.some((f) => f[owner].ownsIpset(name));

/** The nftables tables of each owner, removed whole. */
export const NFT_TABLES: Readonly<Record<Owner, readonly NftTableName[]>> = {
  "kube-proxy": NFT_FOOTPRINT["kube-proxy"].tables,
  kpng: NFT_FOOTPRINT.kpng.tables,
};
