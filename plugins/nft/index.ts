// `kpng --backend nft`: nftables rules in kpng's own tables, one atomic
// transaction per sync, after the first only what changed (backend.ts).

import type { BackendFactory } from "../../src/plugins/toolkit/index.ts";
import { NftBackend } from "./backend.ts";

export { NftBackend, createNftBackend, type NftOptions, type SyncStats } from "./backend.ts";

export default ((ctx) => new NftBackend(ctx)) satisfies BackendFactory;
