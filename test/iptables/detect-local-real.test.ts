// detectLocalMode with real packets through the iptables backend (real
// iptables-restore; kube-proxy's LocalTrafficDetector; the rig is
// test/harness/detect-local-rig.ts): per mode, which sources reach a cluster
// IP unmasqueraded and short-circuit an eTP=Local external IP, and which are
// masqueraded or dropped.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { IptablesBackend } from "../../plugins/iptables/index.ts";
import {
  clusterCIDRs,
  createDetectLocalWorld,
  type DetectLocalWorld,
  detectLocalCases,
  detectLocalServices,
  expected,
  observe,
} from "../harness/detect-local-rig.ts";
import { testConfig, testContext } from "./fixtures.ts";

let w: DetectLocalWorld;
beforeAll(async () => {
  w = await createDetectLocalWorld("kpdi");
});
afterAll(() => w?.destroy());

describe("iptables: detectLocalMode with real packets", () => {
  for (const c of detectLocalCases)
    test(c.name, async () => {
      const config = testConfig({ clusterCIDRs, localDetect: c.localDetect });
      const backend = new IptablesBackend(testContext(config), { executor: w.topo.executor(w.topo.node.ns), monitorPeriodMs: 0 });
      try {
        await backend.setup();
        for (const { service, endpoints } of detectLocalServices(w.topo)) {
          backend.setService(service);
          for (const [key, ep] of endpoints) backend.setEndpoint(service.Namespace, service.Name, key, ep);
        }
        await backend.sync();
        expect(await observe(w)).toEqual(expected(c));
      } finally {
        await backend.close();
      }
    }, 60_000);
});
