// `kpng --backend iptables`: kube-proxy-style iptables rules (backend.ts),
// programmed with `iptables-restore --noflush` (and ip6tables-restore),
// partial restores of the changed services' chains after the first full one.

import type { BackendFactory } from "../../src/host/toolkit/index.ts";
import { IptablesBackend } from "./backend.ts";

export { IptablesBackend, type IptablesOptions, type SyncStats } from "./backend.ts";

// What it leaves behind (and kube-proxy's iptables mode): for --cleanup and the migration from kube-proxy
export { spawnExecutor } from "./executor.ts";
export {
  BUILTIN_CHAINS,
  IPTABLES_FOOTPRINT,
  KUBE_PROXY_CANARY,
  parseIptablesSave,
  restoreRemovingChains,
  summarize,
  type IptablesFootprint,
  type IptTable,
} from "./leftovers.ts";

export default ((ctx) => new IptablesBackend(ctx)) satisfies BackendFactory;
