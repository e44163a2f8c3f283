// How the API server is found and authenticated, as kube-proxy does it:
// --kubeconfig, --master over it or alone, or the pod's service account;
// and that TLS (the cluster CA) and the token really reach the server.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { KpngError } from "../../src/core/errors.ts";
import { expectOK, kubeGet, readBody } from "../../src/core/sources/kube-http.ts";
import { loadKubeConfig } from "../../src/core/sources/kube.ts";
import { node } from "../fixtures/k8s.ts";
import { FakeApiServer, makeTestCert } from "./api-server.ts";
import { tempDir, testCert } from "./helpers.ts";

const tmp = tempDir();
let api: FakeApiServer;
let plain: FakeApiServer;

beforeAll(async () => {
  api = await FakeApiServer.start(testCert(tmp.dir));
  plain = await FakeApiServer.start();
  for (const s of [api, plain]) s.apply(node("node-1"));
});
afterAll(async () => {
  await api.close();
  await plain.close();
  tmp.remove();
});

/** Lists nodes through the loaded configuration: proves server, CA and credentials. */
async function nodesVia(kc: ReturnType<typeof loadKubeConfig>): Promise<string[]> {
  const res = await expectOK(await kubeGet(kc)("/api/v1/nodes", {}, AbortSignal.timeout(5000)));
  return (JSON.parse(await readBody(res)) as { items: Array<{ metadata: { name: string } }> }).items.map((i) => i.metadata.name);
}

const invalidMessage = (f: () => unknown) => {
  try {
    f();
  } catch (err) {
    expect(err).toBeInstanceOf(KpngError);
    return (err as Error).message;
  }
  throw new Error("did not throw");
};

describe("finding the API server", () => {
  test("--kubeconfig: its server, CA and token", async () => {
    const kc = loadKubeConfig({ kubeconfig: api.writeKubeconfig(tmp.dir) });
    expect(await nodesVia(kc)).toEqual(["node-1"]);
  });

  test("--master over --kubeconfig: the kubeconfig's credentials, the flag's server", async () => {
    const path = api.writeKubeconfig(tmp.dir, "elsewhere");
    writeFileSync(path, readFileSync(path, "utf8").replace(api.url, "https://127.0.0.1:1"));
    const kc = loadKubeConfig({ kubeconfig: path, master: api.url });
    expect(kc.getCurrentCluster()!.server).toBe(api.url);
    expect(await nodesVia(kc)).toEqual(["node-1"]);
  });

  test("--master alone, plain http: no credentials", async () => {
    const kc = loadKubeConfig({ master: plain.url });
    // the fake server wants the token: reaching it and being refused proves the route
    await expect(nodesVia(kc)).rejects.toThrow("HTTP 401");
  });

  test("in a pod: the service account's token and CA, KUBERNETES_SERVICE_HOST/PORT", async () => {
    const prefix = join(tmp.dir, "pod");
    const sa = join(prefix, "var/run/secrets/kubernetes.io/serviceaccount");
    mkdirSync(sa, { recursive: true });
    writeFileSync(join(sa, "token"), "test-token");
    writeFileSync(join(sa, "ca.crt"), testCert(tmp.dir).cert);
    writeFileSync(join(sa, "namespace"), "kube-system");
    const kc = loadKubeConfig({ env: { KUBERNETES_SERVICE_HOST: "127.0.0.1", KUBERNETES_SERVICE_PORT: String(api.port) }, inClusterPrefix: prefix });
    expect(kc.getCurrentCluster()!.server).toBe(api.url);
    expect(await nodesVia(kc)).toEqual(["node-1"]);
  });

  test("a server whose certificate the CA did not sign is refused", async () => {
    const path = api.writeKubeconfig(tmp.dir, "wrong-ca");
    const stranger = makeTestCert(mkdtempSync(join(tmp.dir, "stranger-")));
    const caData = (c: string) => Buffer.from(c).toString("base64");
    writeFileSync(path, readFileSync(path, "utf8").replace(caData(testCert(tmp.dir).cert), caData(stranger.cert)));
    await expect(nodesVia(loadKubeConfig({ kubeconfig: path }))).rejects.toThrow();
  });

  const bad: Array<{ name: string; opts: Parameters<typeof loadKubeConfig>[0]; error: RegExp }> = [
    { name: "kubeconfig file missing", opts: { kubeconfig: "/nonexistent/kubeconfig" }, error: /--kubeconfig \/nonexistent\/kubeconfig: cannot load: ENOENT/ },
    { name: "master not a URL", opts: { master: "api.example:6443" }, error: /flag --master: "api\.example:6443" is not an http\(s\) URL/ },
    { name: "nothing given outside a pod", opts: { env: {} }, error: /no --kubeconfig, --master or --input given, and not running in a pod/ },
    { name: "in a pod without a token", opts: { env: { KUBERNETES_SERVICE_HOST: "127.0.0.1", KUBERNETES_SERVICE_PORT: "443" }, inClusterPrefix: "/nonexistent" }, error: /no service account token/ },
  ];
  for (const c of bad) test(`bad: ${c.name}`, () => expect(invalidMessage(() => loadKubeConfig(c.opts))).toMatch(c.error));

  test("bad: a kubeconfig with no current cluster", () => {
    const p = join(tmp.dir, "empty-kc");
    writeFileSync(p, "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\ncurrent-context: nowhere\n");
    expect(invalidMessage(() => loadKubeConfig({ kubeconfig: p }))).toMatch(/no cluster for current-context "nowhere"/);
  });
});
