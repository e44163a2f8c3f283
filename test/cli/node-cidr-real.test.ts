// detectLocalMode NodeCIDR against the real kube-apiserver 1.36.2, kpng
// started as a user runs it (kube-proxy's flags, --dry-run: the rules are
// printed, nothing is programmed). As kube-proxy (server_linux.go
// waitForPodCIDR, pkg/proxy/node.go NodePodCIDRHandler): it waits for the
// Node's spec.podCIDRs before programming anything, renders with them, and
// exits (1) when the Node names other ones, to start again with those.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LOADED_WAIT_MS, startKpng, type KpngProcess } from "../harness/kpng-process.ts";
import { haveK8s, type KubeApiServer, sharedApiServer } from "../harness/kube-apiserver.ts";
import { v4 } from "../fixtures/addresses.ts";
import { node, slice, svc } from "../fixtures/k8s.ts";

const NODE = `dl-${Math.random().toString(36).slice(2, 8)}`;
const dir = mkdtempSync(join(tmpdir(), "kpng-node-cidr-"));
const real = haveK8s("detectLocalMode NodeCIDR against a real API server");

describe.skipIf(!real)("NodeCIDR: the Node's pod CIDRs, from the real API server", () => {
  let api: KubeApiServer;
  let kc: string;
  let kpng: KpngProcess | undefined;

  beforeAll(async () => {
    api = await sharedApiServer();
    // the Node registers without pod CIDRs (the IPAM controller has not allocated them yet)
    await api.apply(
      node(NODE, { ips: [v4.node(1)] }),
      svc({ name: "dl-web", clusterIPs: [v4.clusterIP(30)], ports: [{ name: "http", port: 80, targetPort: 8080 }] }),
      slice({ service: "dl-web", endpoints: [{ ip: v4.pod(1, 5), node: NODE }] }),
    );
    kc = api.writeKubeconfig(join(dir, "kubeconfig"), { user: "kube-proxy" });
  }, 90_000);
  afterAll(async () => {
    await kpng?.stop("SIGKILL");
    if (api) await api.kubectl(["delete", "node", NODE, "--ignore-not-found"]).catch(() => {});
    rmSync(dir, { recursive: true, force: true });
  });

  test("waits for spec.podCIDRs, renders with them, exits 1 when the Node comes back with others", async () => {
    kpng = startKpng([
      "--kubeconfig",
      kc,
      "--hostname-override",
      NODE,
      "--proxy-mode=nftables",
      "--detect-local-mode=NodeCIDR",
      "--cluster-cidr=198.19.0.0/16",
      "--dry-run",
      "--healthz-port=0",
      "--metrics-port=0",
    ]);
    await kpng.waitFor(/waiting for the Node's spec\.podCIDRs/);
    // nothing is programmed meanwhile: not even with the cluster CIDR
    await Bun.sleep(1000);
    expect(kpng.stdout.filter((l) => l.includes("add rule"))).toEqual([]);

    // spec.podCIDRs may be set once (the API server refuses a change): as the node IPAM controller does
    await api.kubectl(["patch", "node", NODE, "-p", JSON.stringify({ spec: { podCIDR: "198.19.7.0/24", podCIDRs: ["198.19.7.0/24"] } })]);
    const rule = await kpng.waitFor(/ip daddr @cluster-ips ip saddr != 198\.19\.7\.0\/24 jump mark-for-masquerade/);
    expect(rule).not.toContain("198.19.0.0/16");

    // the only way a Node's pod CIDRs change: it is deleted and registers again with others
    await api.kubectl(["delete", "node", NODE]);
    await api.apply(Object.assign(node(NODE, { ips: [v4.node(1)] }), { spec: { podCIDR: "198.19.8.0/24", podCIDRs: ["198.19.8.0/24"] } }));
    const code = await Promise.race([kpng.proc.exited, Bun.sleep(LOADED_WAIT_MS).then(() => "still running")]);
    expect(code).toBe(1);
    expect(kpng.stderr.join("\n")).toContain(`node ${NODE} spec.podCIDRs changed from 198.19.7.0/24 to 198.19.8.0/24`);
  }, 210_000);
});
