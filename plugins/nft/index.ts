// `kpng --backend nft`: nftables rules in kpng's own tables, one atomic
// transaction per sync, after the first only what changed (backend.ts).

import type { BackendFactory } from "../../src/host/toolkit/index.ts";
import { NftBackend } from "./backend.ts";

export { NftBackend, createNftBackend, type NftOptions, type SyncStats } from "./backend.ts";

// What it leaves behind (and kube-proxy's nftables mode): for --cleanup, the migration from kube-proxy and the watch for it
export { NFT_FOOTPRINT, nftObjectsExist, type NftObject, type NftTableName } from "./leftovers.ts";

export default ((ctx) => new NftBackend(ctx)) satisfies BackendFactory;
