// detectLocalMode with real packets through the nft backend (kube-proxy's
// LocalTrafficDetector; the rig is test/harness/detect-local-rig.ts): per
// mode, which sources reach a cluster IP unmasqueraded and short-circuit an
// eTP=Local external IP, and which are masqueraded or dropped.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createNftBackend } from "../../plugins/nft/index.ts";
import {
  clusterCIDRs,
  createDetectLocalWorld,
  type DetectLocalWorld,
  detectLocalCases,
  detectLocalServices,
  expected,
  observe,
} from "../harness/detect-local-rig.ts";
import { context, nodeConfig, nodeState } from "./fixtures.ts";

let w: DetectLocalWorld;
beforeAll(async () => {
  w = await createDetectLocalWorld("kpdn");
});
afterAll(() => w?.destroy());

describe("nft: detectLocalMode with real packets", () => {
  for (const c of detectLocalCases)
    test(c.name, async () => {
      const backend = createNftBackend(context(nodeConfig({ clusterCIDRs, localDetect: c.localDetect })), {
        exec: w.topo.executor(w.topo.node.ns),
      });
      await backend.apply(nodeState(detectLocalServices(w.topo)), null);
      expect(await observe(w)).toEqual(expected(c));
      await backend.close?.();
    }, 60_000);
});
