// With an API server as the source, the Node may register after kpng starts
// (the kubelet and kube-proxy start together): kpng waits for its addresses
// before the first sync, logged, rather than program node ports nowhere.
// The whole process, with the flags an operator passes.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { v4 } from "../../fixtures/addresses.ts";
import { node, slice, svc } from "../../fixtures/k8s.ts";
import { FakeApiServer } from "../../harness/api-server.ts";
import { tempDir, testCert } from "./helpers.ts";

const root = join(import.meta.dir, "../../..");
const tmp = tempDir("kpng-node-wait-");
let api: FakeApiServer;

beforeAll(async () => {
  api = await FakeApiServer.start(testCert(tmp.dir));
  api.apply(svc({ name: "web", type: "NodePort", ports: [{ name: "http", port: 80, targetPort: 8080, nodePort: 30080 }] }));
  api.apply(slice({ service: "web", endpoints: [{ ip: v4.pod(2, 5), node: "node-2" }] }));
});
afterAll(async () => {
  await api?.close();
  tmp.remove();
});

describe("waiting for the Node at start-up (cluster source)", () => {
  test("the Node registers 1 s after start: the first sync already has its node ports", async () => {
    const p = Bun.spawn(
      [
        process.execPath,
        join(root, "src/main.ts"),
        "--kubeconfig",
        api.writeKubeconfig(tmp.dir),
        "--hostname-override",
        "node-1",
        "--backend",
        "nft",
        "--dry-run",
        "--once",
      ],
      { cwd: root, stdout: "pipe", stderr: "pipe" },
    );
    setTimeout(() => api.apply(node("node-1", { ips: [v4.node(1)] })), 1000);
    const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
    expect(code).toBe(0);
    expect(err).toMatch(/INFO kpng: waiting for the Node's InternalIP\/ExternalIP node=node-1 timeoutSeconds=30/);
    expect(err).toContain(`node IPs node=node-1 ips=${v4.node(1)}`);
    expect(out).toContain(`add element ip kpng nodeport-ips { ${v4.node(1)} }`);
    expect(out).toMatch(/add element ip kpng service-nodeports \{ tcp \. 30080 /);
  });

  test("--bind-address given: no wait for the Node", async () => {
    const t0 = performance.now();
    const p = Bun.spawn(
      [
        process.execPath,
        join(root, "src/main.ts"),
        "--kubeconfig",
        api.writeKubeconfig(tmp.dir),
        "--hostname-override",
        "node-9",
        "--bind-address",
        v4.node(9),
        "--backend",
        "nft",
        "--dry-run",
        "--once",
      ],
      { cwd: root, stdout: "pipe", stderr: "pipe" },
    );
    const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
    expect(code).toBe(0);
    expect(err).not.toContain("waiting for the Node");
    expect(out).toContain(`add element ip kpng nodeport-ips { ${v4.node(9)} }`);
    expect(performance.now() - t0).toBeLessThan(15_000);
  });
});
