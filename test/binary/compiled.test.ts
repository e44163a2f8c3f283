// The single binary: `bun run build` writes dist/kpng; copied alone into an
// empty directory (no node_modules beside it) it runs every command, loads
// plugins from disk and passes the plugin and sidecar suite. As a brain it
// reads the real kube-apiserver (test/harness/kube-apiserver.ts) over TLS
// with the kubeconfig's CA: the compiled binary's list/watch runs on
// node:https, not on the client library that ignores that CA there.

import { afterAll, beforeAll, expect, test } from "bun:test";
import { copyFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import YAML from "yaml";
import { ROOT, startKpng, startServe, tempDir } from "../harness/kpng-process.ts";
import { agentTls, listenTls, makeMutualTls } from "../harness/tls-flags.ts";
import { haveK8s, type K8sObject, sharedApiServer } from "../harness/kube-apiserver.ts";
import { compiledKpng } from "../fixtures/compiled.ts";
import { pluginSuite } from "./suite.ts";

const dir = tempDir("kpng-bin-");
const bin = join(dir.path, "kpng");
const real = haveK8s("dist/kpng against the real kube-apiserver");

beforeAll(async () => {
  dir.create();
  copyFileSync(await compiledKpng(), bin);
  // a build of dist/kpng (shared by the suites of one test process) on a loaded machine
}, 300_000);
afterAll(() => dir.remove());

test("dist/kpng stands alone: no node_modules beside it", async () => {
  expect(existsSync(join(dir.path, "node_modules"))).toBe(false);
  const p = Bun.spawn([bin, "serve", "--help"], { cwd: dir.path, stdout: "pipe", stderr: "pipe" });
  expect(await p.exited).toBe(0);
  expect(await new Response(p.stdout).text()).toContain("--listen");
});

test("dist/kpng local prints the node-local state", async () => {
  const p = startKpng(["local", "--input", join(ROOT, "examples/cluster.yaml"), "--node-name", "node-1"], { bin });
  expect(await p.proc.exited).toBe(0);
  expect(JSON.parse(p.stdout.join("\n")).nodeName).toBe("node-1");
});

test.skipIf(!real)(
  "dist/kpng serves the real API server's cluster and follows it over mutual TLS (node:tls in the single binary)",
  async () => {
    const api = await sharedApiServer();
    await api.apply(...(YAML.parse(await Bun.file(join(ROOT, "examples/cluster.yaml")).text()) as { items: K8sObject[] }).items);
    const kubeconfig = api.writeKubeconfig(join(dir.path, "kubeconfig"));
    makeMutualTls(dir.path);
    const brain = await startServe(
      ["--kubeconfig", kubeconfig, "--node-name", "node-1", "--listen", "tcp://127.0.0.1:0", ...listenTls(dir.path)],
      { bin },
    );
    try {
      const api = `tcp://127.0.0.1:${(brain.addresses[0] as { port: number }).port}`;
      const agent = startKpng(["local", "--api", api, ...agentTls(dir.path), "--node-name", "node-2"], { bin });
      const full = startKpng(["local", "--kubeconfig", kubeconfig, "--node-name", "node-2"], { bin });
      expect(await agent.proc.exited).toBe(0);
      expect(await full.proc.exited).toBe(0);
      await Bun.sleep(20); // let the pumps drain
      expect(agent.stdout.join("\n")).toBe(full.stdout.join("\n"));
      // what examples/cluster.yaml holds for node-2, and the API server's own default/kubernetes
      const services = (JSON.parse(full.stdout.join("\n")) as { services: Array<{ namespace: string; name: string }> }).services;
      expect(services.map((s) => `${s.namespace}/${s.name}`)).toContain("shop/web");
      expect(services.map((s) => `${s.namespace}/${s.name}`)).toContain("default/kubernetes");
    } finally {
      await brain.stop();
    }
  },
  // the brain's start (a loaded wait), the processes' exits
  150_000,
);

pluginSuite("dist/kpng", () => bin);
