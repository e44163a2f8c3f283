// What this backend leaves behind on a node, and what kube-proxy's nftables
// mode leaves: one table per family each, removed whole. The host's leftovers
// sweep and its watch for another proxy (src/host/leftovers/) ask through
// index.ts.

import type { NftObject } from "./netlink-batch.ts";
import { FAMILIES, TABLE } from "./names.ts";

export type { NftObject } from "./netlink-batch.ts";

export interface NftTableName {
  family: string;
  name: string;
}

/** kube-proxy's nftables mode: one `kube-proxy` table per family (pkg/proxy/nftables); kpng's nft backend: `kpng`. */
export const NFT_FOOTPRINT: Readonly<Record<"kpng" | "kube-proxy", { tables: readonly NftTableName[] }>> = {
  "kube-proxy": {
    tables: [
      { family: "ip", name: "kube-proxy" },
      { family: "ip6", name: "kube-proxy" },
    ],
  },
  kpng: { tables: FAMILIES.map((family) => ({ family, name: TABLE })) },
};

/** Which of these tables and chains exist: one netlink socket opened for them, one send (cheap, whatever the ruleset's size). */
export async function nftObjectsExist(objects: readonly NftObject[]): Promise<boolean[]> {
  const [{ openBatchSocket }, { objectQuery, objectsFound }] = await Promise.all([
    import("./netlink-socket.ts"),
    import("./netlink-batch.ts"),
  ]);
  const socket = openBatchSocket();
  try {
    return objectsFound(objects, socket.send(objectQuery(objects)));
  } finally {
    socket.close();
  }
}
