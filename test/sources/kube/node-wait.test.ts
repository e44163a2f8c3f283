// With an API server as the source, the Node may register after kpng starts
// (the kubelet and kube-proxy start together): kpng waits for its addresses
// before the first sync, logged, rather than program node ports nowhere.
// The whole process, with the flags an operator passes, against the real
// kube-apiserver 1.36.2 (test/harness/kube-apiserver.ts): the Node is
// created with kubectl while kpng waits.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { v4 } from "../../fixtures/addresses.ts";
import { node, slice, svc } from "../../fixtures/k8s.ts";
import { haveK8s, type KubeApiServer, sharedApiServer } from "../../harness/kube-apiserver.ts";
import { tempDir } from "./helpers.ts";

const root = join(import.meta.dir, "../../..");
const tmp = tempDir("kpng-node-wait-");
let api: KubeApiServer;
let kubeconfig: string;
const real = haveK8s("waiting for the Node at start-up");

beforeAll(async () => {
  if (!real) return;
  api = await sharedApiServer();
  kubeconfig = api.writeKubeconfig(join(tmp.dir, "kubeconfig"));
  await api.apply(
    svc({ name: "web", type: "NodePort", ports: [{ name: "http", port: 80, targetPort: 8080, nodePort: 30080 }] }),
    slice({ service: "web", endpoints: [{ ip: v4.pod(2, 5), node: "node-2" }] }),
  );
}, 60_000);
afterAll(() => tmp.remove());

/** kpng against the API server with FLAGS, one nft dry-run sync and out */
const once = (...flags: string[]) =>
  Bun.spawn(
    [process.execPath, join(root, "src/main.ts"), "--kubeconfig", kubeconfig, ...flags, "--backend", "nft", "--dry-run", "--once"],
    {
      cwd: root,
      stdout: "pipe",
      stderr: "pipe",
    },
  );

describe.skipIf(!real)("waiting for the Node at start-up (cluster source)", () => {
  test("the Node registers 1 s after start: the first sync already has its node ports", async () => {
    const p = once("--hostname-override", "node-1");
    const registered = Bun.sleep(1000).then(() => api.apply(node("node-1", { ips: [v4.node(1)] })));
    const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited, registered]);
    expect(code).toBe(0);
    expect(err).toMatch(/INFO kpng: waiting for the Node's InternalIP\/ExternalIP node=node-1 timeoutSeconds=10/);
    expect(err).toContain(`node IPs node=node-1 ips=${v4.node(1)}`);
    expect(out).toContain(`add element ip kpng nodeport-ips { ${v4.node(1)} }`);
    expect(out).toMatch(/add element ip kpng service-nodeports \{ tcp \. 30080 /);
  });

  test("--bind-address given: no wait for the Node", async () => {
    const p = once("--hostname-override", "node-9", "--bind-address", v4.node(9));
    const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
    expect(code).toBe(0);
    expect(err).not.toContain("waiting for the Node");
    expect(out).toContain(`add element ip kpng nodeport-ips { ${v4.node(9)} }`);
  });
});
