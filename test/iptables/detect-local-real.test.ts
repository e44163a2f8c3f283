// detectLocalMode with real packets through the iptables backend (real
// iptables-restore; kube-proxy's LocalTrafficDetector; the rig is
// test/harness/detect-local-rig.ts): per mode, which sources reach a cluster
// IP unmasqueraded and short-circuit an eTP=Local external IP, and which are
// masqueraded or dropped.

import { IptablesBackend } from "../../plugins/iptables/index.ts";
import { detectLocalServices, detectLocalSuite } from "../harness/detect-local-rig.ts";
import { testConfig, testContext } from "./fixtures.ts";

detectLocalSuite("iptables", async (w, config) => {
  const backend = new IptablesBackend(testContext(testConfig(config)), { executor: w.topo.executor(w.topo.node.ns), monitorPeriodMs: 0 });
  const close = () => backend.close();
  try {
    await backend.setup();
    for (const { service, endpoints } of detectLocalServices(w.topo)) {
      backend.setService(service);
      for (const [key, ep] of endpoints) backend.setEndpoint(service.Namespace, service.Name, key, ep);
    }
    await backend.sync();
  } catch (err) {
    await close();
    throw err;
  }
  return close;
});
