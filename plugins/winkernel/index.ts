// `kpng --backend winkernel`: HNS load-balancer policies (backend.ts). On
// Windows it calls the Host Compute Network API (executor.ts, imported only
// there, so Linux never opens computenetwork.dll); elsewhere, and with
// --dry-run, a recorder stands in and --dry-run prints each HNS call as one
// JSON line.

import type { BackendFactory } from "../../src/host/toolkit/index.ts";
import { createWinkernelBackend } from "./backend.ts";
import type { HnsClient } from "./hns.ts";
import { hnsRecorder } from "./recorder.ts";

export { WinkernelBackend, createWinkernelBackend, type WinkernelOptions } from "./backend.ts";

export default (async (ctx) => {
  let hns: HnsClient;
  if (ctx.config.dryRun) {
    hns = hnsRecorder({ onCall: (c) => ctx.out(JSON.stringify(c) + "\n") });
  } else if (process.platform === "win32") {
    const { createHcnClient } = await import("./executor.ts");
    hns = createHcnClient(ctx.config.winkernel.networkName);
  } else {
    ctx.log.warn("winkernel: no Host Network Service on this platform; HNS calls are recorded, not applied", {
      platform: process.platform,
    });
    hns = hnsRecorder();
  }
  return createWinkernelBackend(ctx, { hns });
}) satisfies BackendFactory;
