// `kpng --backend ipvs`: IPVS virtual servers + ipsets + a few iptables
// rules (backend.ts). Deprecated upstream (KEP-5495): setup logs the warning,
// and the backend's nodeWarning has the CLI record it as a Node Warning event.

import type { BackendFactory } from "../../src/host/toolkit/index.ts";
import { createIpvsBackend } from "./backend.ts";
import { commandExecutor, printingExecutor } from "./executor.ts";

export {
  IPVS_DEPRECATION_MESSAGE,
  IPVS_DEPRECATION_REASON,
  IpvsBackend,
  createIpvsBackend,
  type IpvsOptions,
  type SyncStats,
} from "./backend.ts";

// What it leaves behind (and kube-proxy's IPVS mode): for --cleanup and the migration from kube-proxy
export { IPVS_DEVICE, IPVS_FOOTPRINT, virtualServersRemoving, type IpvsFootprint, type VirtualServersListing } from "./leftovers.ts";

export default ((ctx) =>
  createIpvsBackend(ctx, {
    executor: ctx.config.dryRun ? printingExecutor(ctx.out) : commandExecutor(),
  })) satisfies BackendFactory;
