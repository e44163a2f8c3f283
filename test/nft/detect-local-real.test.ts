// detectLocalMode with real packets through the nft backend (kube-proxy's
// LocalTrafficDetector; the rig is test/harness/detect-local-rig.ts): per
// mode, which sources reach a cluster IP unmasqueraded and short-circuit an
// eTP=Local external IP, and which are masqueraded or dropped.

import { createNftBackend } from "../../plugins/nft/index.ts";
import { detectLocalServices, detectLocalSuite } from "../harness/detect-local-rig.ts";
import { context, nodeConfig, nodeState } from "./fixtures.ts";

detectLocalSuite("nft", async (w, config) => {
  const backend = createNftBackend(context(nodeConfig(config)), { exec: w.topo.executor(w.topo.node.ns) });
  await backend.apply(nodeState(detectLocalServices(w.topo)), null);
  return async () => backend.close?.();
});
