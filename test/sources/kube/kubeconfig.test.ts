// How the API server is found and authenticated, as kube-proxy does it:
// --kubeconfig, --master over it or alone, or the pod's service account;
// and that TLS (the cluster CA, the server name) and each kind of credential
// (token, rotated token file, basic auth, client certificate, exec plugin)
// really reach the server: every case lists nodes over TLS, and a server
// refuses what it does not accept.
//
// The real kube-apiserver 1.36.2 (test/harness/kube-apiserver.ts, one of this
// file's own, with a client CA) holds the kubeconfig's server, CA and token,
// client certificates of its client CA and of another, and a serving
// certificate the CA did not sign. The rest stays on the in-repo API server
// (FakeApiServer): basic auth (gone from kube-apiserver since 1.19), tokens
// that change while it runs (rotated files, service-account tokens, exec
// plugins' tokens: the real one reads a static token file here), what a
// request carried (the fake records its Authorization header and client
// certificate), a certificate for a DNS name only, and plain http.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify } from "yaml";
import { KpngError } from "../../../src/core/errors.ts";
import { expectOK, kubeGet, readBody } from "../../../src/core/kube-http/request.ts";
import type { KubeAccess } from "../../../src/core/kube-http/access.ts";
import { loadKubeConfig } from "../../../src/core/sources/kubeconfig.ts";
import { node } from "../../fixtures/k8s.ts";
import { FakeApiServer, makeClientCert, makeTestCert } from "../../harness/api-server.ts";
import { haveK8s, KubeApiServer } from "../../harness/kube-apiserver.ts";
import { tempDir, testCert } from "./helpers.ts";

const tmp = tempDir();
let api: FakeApiServer;
let plain: FakeApiServer;
/** a certificate for DNS:api.test only, served on 127.0.0.1 */
let named: FakeApiServer;
let namedCert: ReturnType<typeof makeTestCert>;

const V1 = "client.authentication.k8s.io/v1";
const V1BETA1 = "client.authentication.k8s.io/v1beta1";
const BASIC = { username: "admin", password: "s3cret" };

beforeAll(async () => {
  const ca = testCert(tmp.dir);
  // The server's own self-signed certificate is a CA: it signs the test client certificates.
  api = await FakeApiServer.start(ca, { clientCA: ca.cert, basic: BASIC });
  plain = await FakeApiServer.start();
  namedCert = makeTestCert(tmp.dir, { san: "DNS:api.test", name: "named" });
  named = await FakeApiServer.start(namedCert);
  for (const s of [api, plain, named]) s.apply(node("node-1"));
});
afterAll(async () => {
  await api.close();
  await plain.close();
  await named.close();
  tmp.remove();
});

/** Lists nodes through the loaded configuration: proves server, CA and credentials. */
async function nodesVia(access: KubeAccess): Promise<string[]> {
  const res = await expectOK(await kubeGet(access)("/api/v1/nodes", {}, AbortSignal.timeout(5000)));
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

const b64 = (s: string) => Buffer.from(s).toString("base64");

/**
 * A fresh directory holding `files` (scripts made executable) and a
 * kubeconfig whose one context joins cluster "c" and user "u", written as
 * given; returns the kubeconfig's path and the directory.
 */
function kubeconfig(
  cluster: Record<string, unknown>,
  user?: Record<string, unknown>,
  files: Record<string, string> = {},
): { path: string; dir: string } {
  const dir = mkdtempSync(join(tmp.dir, "kc-"));
  for (const [f, text] of Object.entries(files)) writeFileSync(join(dir, f), text, { mode: /\.(sh|js)$/.test(f) ? 0o755 : 0o644 });
  const doc = {
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "c", cluster }],
    users: user ? [{ name: "u", user }] : [],
    contexts: [{ name: "ctx", context: { cluster: "c", ...(user ? { user: "u" } : {}) } }],
    "current-context": "ctx",
  };
  const path = join(dir, "kubeconfig");
  writeFileSync(path, stringify(doc));
  return { path, dir };
}

/** the API server, trusted through the inline CA */
const apiCluster = () => ({ server: api.url, "certificate-authority-data": b64(testCert(tmp.dir).cert) });

const real = haveK8s("kubeconfigs against the real API server");

describe.skipIf(!real)("the real kube-apiserver: server, CA and credentials", () => {
  let kube: KubeApiServer;
  let clientCA: ReturnType<typeof makeTestCert>;
  beforeAll(async () => {
    const dir = mkdtempSync(join(tmp.dir, "real-"));
    clientCA = makeTestCert(dir, { name: "client-ca" });
    kube = await KubeApiServer.start({ args: [`--client-ca-file=${join(dir, "client-ca.crt")}`] });
    await kube.apply(node("node-1"));
  }, 60_000);
  afterAll(async () => {
    await kube?.close();
  });
  const realCluster = () => ({ server: kube.url, "certificate-authority-data": b64(kube.ca) });

  test("--kubeconfig: its server, CA and token (system:kube-proxy)", async () => {
    const kc = loadKubeConfig({ kubeconfig: kube.writeKubeconfig(join(tmp.dir, "real-kubeconfig")) });
    expect(await nodesVia(kc)).toEqual(["node-1"]);
  });

  test("a token the server does not know is refused: HTTP 401", async () => {
    const { path } = kubeconfig(realCluster(), { token: "nobody-has-this-token" });
    await expect(nodesVia(loadKubeConfig({ kubeconfig: path }))).rejects.toThrow("HTTP 401");
  });

  test("a client certificate of its client CA, CN system:kube-proxy, with no token; one from another CA is refused", async () => {
    const mine = makeClientCert(mkdtempSync(join(tmp.dir, "client-")), clientCA, "system:kube-proxy");
    const ok = kubeconfig(realCluster(), { "client-certificate-data": b64(mine.cert), "client-key-data": b64(mine.key) });
    expect(await nodesVia(loadKubeConfig({ kubeconfig: ok.path }))).toEqual(["node-1"]);
    const strangerDir = mkdtempSync(join(tmp.dir, "stranger-"));
    const theirs = makeClientCert(strangerDir, makeTestCert(strangerDir, { name: "other-ca" }), "system:kube-proxy");
    const bad = kubeconfig(realCluster(), { "client-certificate-data": b64(theirs.cert), "client-key-data": b64(theirs.key) });
    await expect(nodesVia(loadKubeConfig({ kubeconfig: bad.path }))).rejects.toThrow("HTTP 401");
  });

  test("a server whose certificate the CA did not sign is refused", async () => {
    const stranger = makeTestCert(mkdtempSync(join(tmp.dir, "stranger-")));
    const { path } = kubeconfig({ server: kube.url, "certificate-authority-data": b64(stranger.cert) }, { token: "any" });
    await expect(nodesVia(loadKubeConfig({ kubeconfig: path }))).rejects.toThrow();
  });
});

describe("finding the API server", () => {
  test("--master over --kubeconfig: the kubeconfig's credentials, the flag's server", async () => {
    const path = api.writeKubeconfig(tmp.dir, "elsewhere");
    writeFileSync(path, readFileSync(path, "utf8").replace(api.url, "https://127.0.0.1:1"));
    const kc = loadKubeConfig({ kubeconfig: path, master: api.url });
    expect(kc.server).toBe(api.url);
    expect(await nodesVia(kc)).toEqual(["node-1"]);
  });

  test("--master alone, plain http: no credentials", async () => {
    const kc = loadKubeConfig({ master: plain.url });
    // the fake server wants the token: reaching it and being refused proves the route
    await expect(nodesVia(kc)).rejects.toThrow("HTTP 401");
    expect(plain.requests.at(-1)!.authorization).toBeUndefined();
  });

  test("in a pod: the service account's token and CA, KUBERNETES_SERVICE_HOST/PORT", async () => {
    const prefix = join(tmp.dir, "pod");
    const sa = join(prefix, "var/run/secrets/kubernetes.io/serviceaccount");
    mkdirSync(sa, { recursive: true });
    writeFileSync(join(sa, "token"), "test-token");
    writeFileSync(join(sa, "ca.crt"), testCert(tmp.dir).cert);
    writeFileSync(join(sa, "namespace"), "kube-system");
    const kc = loadKubeConfig({
      env: { KUBERNETES_SERVICE_HOST: "127.0.0.1", KUBERNETES_SERVICE_PORT: String(api.port) },
      inClusterPrefix: prefix,
    });
    expect(kc.server).toBe(api.url);
    expect(await nodesVia(kc)).toEqual(["node-1"]);
    // Bound service-account tokens are rotated in place by the kubelet.
    api.tokens.add("pod-token-2");
    writeFileSync(join(sa, "token"), "pod-token-2\n");
    try {
      expect(await nodesVia(kc)).toEqual(["node-1"]);
      expect(api.requests.at(-1)!.authorization).toBe("Bearer pod-token-2");
    } finally {
      api.tokens.delete("pod-token-2");
    }
    // An IPv6 service address goes in brackets.
    expect(
      loadKubeConfig({ env: { KUBERNETES_SERVICE_HOST: "fd00::1", KUBERNETES_SERVICE_PORT: "443" }, inClusterPrefix: prefix }).server,
    ).toBe("https://[fd00::1]:443");
  });

  const bad: Array<{ name: string; opts: Parameters<typeof loadKubeConfig>[0]; error: RegExp }> = [
    {
      name: "kubeconfig file missing",
      opts: { kubeconfig: "/nonexistent/kubeconfig" },
      error: /--kubeconfig \/nonexistent\/kubeconfig: cannot load: ENOENT/,
    },
    { name: "master not a URL", opts: { master: "api.example:6443" }, error: /flag --master: "api\.example:6443" is not an http\(s\) URL/ },
    {
      name: "nothing given outside a pod",
      opts: { env: {} },
      error: /no --kubeconfig, --master or --input given, and not running in a pod/,
    },
    {
      name: "in a pod without a token",
      opts: { env: { KUBERNETES_SERVICE_HOST: "127.0.0.1", KUBERNETES_SERVICE_PORT: "443" }, inClusterPrefix: "/nonexistent" },
      error: /no service account token/,
    },
  ];
  for (const c of bad) test(`bad: ${c.name}`, () => expect(invalidMessage(() => loadKubeConfig(c.opts))).toMatch(c.error));

  test("bad: a kubeconfig with no current cluster", () => {
    const p = join(tmp.dir, "empty-kc");
    writeFileSync(p, "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\ncurrent-context: nowhere\n");
    expect(invalidMessage(() => loadKubeConfig({ kubeconfig: p }))).toMatch(/no cluster for current-context "nowhere"/);
  });
});

// -- an exec plugin: a shell script that logs each run (KUBERNETES_EXEC_INFO, one line) to $RUNS
// and prints an ExecCredential: token $1 (or the contents of $TOKEN_FILE), apiVersion
// $API_VERSION (default v1), expirationTimestamp $2 if given.
const PLUGIN = `#!/bin/sh
echo "$KUBERNETES_EXEC_INFO" >> "$RUNS"
tok="$1"
[ -n "$TOKEN_FILE" ] && tok="$(cat "$TOKEN_FILE")"
exp=""
[ -n "$2" ] && exp=",\\"expirationTimestamp\\":\\"$2\\""
printf '{"apiVersion":"%s","kind":"ExecCredential","status":{"token":"%s"%s}}\\n' "\${API_VERSION:-${V1}}" "$tok" "$exp"
`;

interface ExecOptions {
  /** more of the plugin's env; `dir` is the kubeconfig's directory */
  env?: (dir: string) => Record<string, string>;
  /** more fields of `exec` */
  exec?: Record<string, unknown>;
  /** more fields of the user */
  user?: Record<string, unknown>;
}

/** A kubeconfig for the API server whose user runs ./plugin.sh (relative: resolved against the kubeconfig's directory). */
function execKubeconfig(args: string[], opts: ExecOptions = {}) {
  const dir = mkdtempSync(join(tmp.dir, "exec-"));
  writeFileSync(join(dir, "plugin.sh"), PLUGIN, { mode: 0o755 });
  const env = Object.entries({ RUNS: join(dir, "runs"), ...opts.env?.(dir) }).map(([name, value]) => ({ name, value }));
  const user = { ...opts.user, exec: { apiVersion: V1, command: "./plugin.sh", args, env, ...opts.exec } };
  const path = join(dir, "kubeconfig");
  writeFileSync(
    path,
    stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{ name: "c", cluster: apiCluster() }],
      users: [{ name: "u", user }],
      contexts: [{ name: "ctx", context: { cluster: "c", user: "u" } }],
      "current-context": "ctx",
    }),
  );
  const runs = () => (existsSync(join(dir, "runs")) ? readFileSync(join(dir, "runs"), "utf8").trim().split("\n") : []);
  return { path, dir, runs };
}

describe("credentials that reach the API server", () => {
  test("a token file, relative to the kubeconfig, is read again for each request: a rotated token is used", async () => {
    const { path, dir } = kubeconfig(apiCluster(), { tokenFile: "token" }, { token: "rotating-1\n" });
    api.tokens.add("rotating-1");
    try {
      const access = loadKubeConfig({ kubeconfig: path });
      expect(await nodesVia(access)).toEqual(["node-1"]);
      expect(api.requests.at(-1)!.authorization).toBe("Bearer rotating-1");
      // The old token is revoked as the new one is written: only a re-read gets in.
      api.tokens.delete("rotating-1");
      api.tokens.add("rotating-2");
      writeFileSync(join(dir, "token"), "rotating-2\n");
      expect(await nodesVia(access)).toEqual(["node-1"]);
      expect(api.requests.at(-1)!.authorization).toBe("Bearer rotating-2");
    } finally {
      api.tokens.delete("rotating-1");
      api.tokens.delete("rotating-2");
    }
  });

  test("a token file wins over an inline token (client-go)", async () => {
    const { path } = kubeconfig(apiCluster(), { token: "stale", tokenFile: "token" }, { token: "test-token" });
    expect(await nodesVia(loadKubeConfig({ kubeconfig: path }))).toEqual(["node-1"]);
  });

  test("basic auth; a wrong password is refused", async () => {
    const ok = kubeconfig(apiCluster(), { ...BASIC });
    expect(await nodesVia(loadKubeConfig({ kubeconfig: ok.path }))).toEqual(["node-1"]);
    expect(api.requests.at(-1)!.authorization).toBe(`Basic ${b64("admin:s3cret")}`);
    const wrong = kubeconfig(apiCluster(), { ...BASIC, password: "guess" });
    await expect(nodesVia(loadKubeConfig({ kubeconfig: wrong.path }))).rejects.toThrow("HTTP 401");
  });

  test("a client certificate and key from files relative to the kubeconfig, with no token", async () => {
    const dir = mkdtempSync(join(tmp.dir, "client-"));
    makeClientCert(dir, testCert(tmp.dir), "kpng");
    const path = join(dir, "kubeconfig");
    writeFileSync(
      path,
      stringify({
        clusters: [{ name: "c", cluster: apiCluster() }],
        users: [{ name: "u", user: { "client-certificate": "client.crt", "client-key": "client.key" } }],
        contexts: [{ name: "x", context: { cluster: "c", user: "u" } }],
        "current-context": "x",
      }),
    );
    expect(await nodesVia(loadKubeConfig({ kubeconfig: path }))).toEqual(["node-1"]);
    expect(api.requests.at(-1)).toMatchObject({ clientCert: true });
    expect(api.requests.at(-1)!.authorization).toBeUndefined();
  });

  test("client-certificate-data and client-key-data; a certificate from another CA is refused", async () => {
    const mine = makeClientCert(mkdtempSync(join(tmp.dir, "client-")), testCert(tmp.dir), "kpng");
    const ok = kubeconfig(apiCluster(), { "client-certificate-data": b64(mine.cert), "client-key-data": b64(mine.key) });
    expect(await nodesVia(loadKubeConfig({ kubeconfig: ok.path }))).toEqual(["node-1"]);
    expect(api.requests.at(-1)).toMatchObject({ clientCert: true });
    const strangerDir = mkdtempSync(join(tmp.dir, "stranger-"));
    const theirs = makeClientCert(strangerDir, makeTestCert(strangerDir, { name: "other-ca" }), "kpng");
    const bad = kubeconfig(apiCluster(), { "client-certificate-data": b64(theirs.cert), "client-key-data": b64(theirs.key) });
    await expect(nodesVia(loadKubeConfig({ kubeconfig: bad.path }))).rejects.toThrow("HTTP 401");
  });

  test("certificate-authority: a file relative to the kubeconfig's directory", async () => {
    const { path } = kubeconfig({ server: api.url, "certificate-authority": "pki/ca.crt" }, { token: "test-token" });
    mkdirSync(join(path, "../pki"));
    writeFileSync(join(path, "../pki/ca.crt"), testCert(tmp.dir).cert);
    expect(await nodesVia(loadKubeConfig({ kubeconfig: path }))).toEqual(["node-1"]);
  });

  test("tls-server-name: the name the server's certificate must carry, when the URL's host is an address", async () => {
    const cluster = { server: named.url, "certificate-authority-data": b64(namedCert.cert) };
    const without = kubeconfig(cluster, { token: "test-token" });
    await expect(nodesVia(loadKubeConfig({ kubeconfig: without.path }))).rejects.toThrow(/altnames|IP/);
    const withName = kubeconfig({ ...cluster, "tls-server-name": "api.test" }, { token: "test-token" });
    expect(await nodesVia(loadKubeConfig({ kubeconfig: withName.path }))).toEqual(["node-1"]);
  });

  test("insecure-skip-tls-verify: no CA, no check", async () => {
    const { path } = kubeconfig({ server: api.url, "insecure-skip-tls-verify": true }, { token: "test-token" });
    expect(await nodesVia(loadKubeConfig({ kubeconfig: path }))).toEqual(["node-1"]);
  });

  test("an exec plugin's token, with its args and env; KUBERNETES_EXEC_INFO says non-interactive", async () => {
    const p = execKubeconfig(["test-token"]);
    expect(await nodesVia(loadKubeConfig({ kubeconfig: p.path }))).toEqual(["node-1"]);
    expect(p.runs().map((l) => JSON.parse(l))).toEqual([{ apiVersion: V1, kind: "ExecCredential", spec: { interactive: false } }]);
  });

  test("provideClusterInfo: the plugin is told the server and its CA", async () => {
    const p = execKubeconfig(["test-token"], { exec: { provideClusterInfo: true } });
    expect(await nodesVia(loadKubeConfig({ kubeconfig: p.path }))).toEqual(["node-1"]);
    expect(JSON.parse(p.runs()[0]).spec.cluster).toEqual({ server: api.url, "certificate-authority-data": b64(testCert(tmp.dir).cert) });
  });

  test("v1beta1 plugins work too", async () => {
    const p = execKubeconfig(["test-token"], { env: () => ({ API_VERSION: V1BETA1 }), exec: { apiVersion: V1BETA1 } });
    expect(await nodesVia(loadKubeConfig({ kubeconfig: p.path }))).toEqual(["node-1"]);
    expect(p.runs()).toHaveLength(1);
  });

  const future = new Date(Date.now() + 3600_000).toISOString();
  const past = new Date(Date.now() - 60_000).toISOString();
  const caching: Array<{ name: string; args: string[]; runs: number }> = [
    { name: "no expirationTimestamp: run once, reused", args: ["test-token"], runs: 1 },
    { name: "expiring in an hour: run once, reused", args: ["test-token", future], runs: 1 },
    { name: "already expired: run again for each request", args: ["test-token", past], runs: 3 },
  ];
  for (const c of caching) {
    test(`exec credential caching: ${c.name}`, async () => {
      const p = execKubeconfig(c.args);
      const access = loadKubeConfig({ kubeconfig: p.path });
      for (let i = 0; i < 3; i++) expect(await nodesVia(access)).toEqual(["node-1"]);
      expect(p.runs()).toHaveLength(c.runs);
    });
  }

  test("exec: requests made together share one run", async () => {
    const p = execKubeconfig(["test-token"]);
    const access = loadKubeConfig({ kubeconfig: p.path });
    expect(await Promise.all([nodesVia(access), nodesVia(access), nodesVia(access)])).toEqual([["node-1"], ["node-1"], ["node-1"]]);
    expect(p.runs()).toHaveLength(1);
  });

  test("exec: a credential the server refuses (401) is dropped; the next request runs the plugin again", async () => {
    const p = execKubeconfig([], { env: (dir) => ({ TOKEN_FILE: join(dir, "plugin-token") }) });
    const tokenFile = join(p.dir, "plugin-token");
    writeFileSync(tokenFile, "revoked");
    const access = loadKubeConfig({ kubeconfig: p.path });
    await expect(nodesVia(access)).rejects.toThrow("HTTP 401");
    writeFileSync(tokenFile, "test-token");
    expect(await nodesVia(access)).toEqual(["node-1"]);
    expect(await nodesVia(access)).toEqual(["node-1"]);
    expect(p.runs()).toHaveLength(2);
  });

  test("exec: a client certificate from the plugin", async () => {
    const dir = mkdtempSync(join(tmp.dir, "exec-cert-"));
    const mine = makeClientCert(dir, testCert(tmp.dir), "kpng");
    const script = join(dir, "plugin.js");
    writeFileSync(
      script,
      `const { readFileSync } = require("node:fs");
console.log(JSON.stringify({ apiVersion: "${V1}", kind: "ExecCredential", status: { clientCertificateData: readFileSync(process.argv[2], "utf8"), clientKeyData: readFileSync(process.argv[3], "utf8") } }));`,
    );
    const { path } = kubeconfig(apiCluster(), {
      exec: { apiVersion: V1, command: process.execPath, args: [script, mine.certFile, mine.keyFile] },
    });
    expect(await nodesVia(loadKubeConfig({ kubeconfig: path }))).toEqual(["node-1"]);
    expect(api.requests.at(-1)).toMatchObject({ clientCert: true });
  });

  test("exec stands aside when the user also has a token (client-go)", async () => {
    const p = execKubeconfig(["revoked"], { user: { token: "test-token" } });
    expect(await nodesVia(loadKubeConfig({ kubeconfig: p.path }))).toEqual(["node-1"]);
    expect(p.runs()).toHaveLength(0);
  });

  test("exec: a failed run is not kept; the next request tries again", async () => {
    const p = execKubeconfig(["test-token"]);
    const script = join(p.dir, "plugin.sh");
    writeFileSync(
      script,
      `#!/bin/sh\n[ -e "${p.dir}/ok" ] || { touch "${p.dir}/ok"; echo "not yet" >&2; exit 1; }\n` + PLUGIN.replace("#!/bin/sh\n", ""),
      { mode: 0o755 },
    );
    const access = loadKubeConfig({ kubeconfig: p.path });
    await expect(nodesVia(access)).rejects.toThrow("exited with code 1: not yet");
    expect(await nodesVia(access)).toEqual(["node-1"]);
  });
});

describe("exec plugins that fail: the request fails with what went wrong", () => {
  const cases: Array<{ name: string; script: string; user?: Record<string, unknown>; error: (dir: string) => string }> = [
    {
      name: "exits non-zero: its exit code and the first line of its stderr",
      script: `#!/bin/sh\necho >&2\necho "error: not logged in" >&2\necho "second line" >&2\nexit 3\n`,
      error: (d) => `[unavailable] exec plugin ${d}/plugin.sh (user "u"): exited with code 3: error: not logged in`,
    },
    {
      name: "prints something that is not JSON",
      script: `#!/bin/sh\necho hello\n`,
      error: (d) => `[invalid_argument] exec plugin ${d}/plugin.sh (user "u"): output: not an ExecCredential (not JSON: "hello")`,
    },
    {
      name: "answers with another apiVersion",
      script: `#!/bin/sh\necho '{"apiVersion":"${V1BETA1}","kind":"ExecCredential","status":{"token":"t"}}'\n`,
      error: (d) =>
        `[invalid_argument] exec plugin ${d}/plugin.sh (user "u"): output: apiVersion: "${V1BETA1}" is not the configured ${V1}`,
    },
    {
      name: "another kind",
      script: `#!/bin/sh\necho '{"apiVersion":"${V1}","kind":"Status"}'\n`,
      error: (d) => `[invalid_argument] exec plugin ${d}/plugin.sh (user "u"): output: kind: "Status" must be "ExecCredential"`,
    },
    {
      name: "no status",
      script: `#!/bin/sh\necho '{"apiVersion":"${V1}","kind":"ExecCredential"}'\n`,
      error: (d) => `[invalid_argument] exec plugin ${d}/plugin.sh (user "u"): output: status: missing`,
    },
    {
      name: "an empty status",
      script: `#!/bin/sh\necho '{"apiVersion":"${V1}","kind":"ExecCredential","status":{}}'\n`,
      error: (d) =>
        `[invalid_argument] exec plugin ${d}/plugin.sh (user "u"): output: status: holds neither a token nor a client certificate and key`,
    },
    {
      name: "a certificate without its key",
      script: `#!/bin/sh\necho '{"apiVersion":"${V1}","kind":"ExecCredential","status":{"clientCertificateData":"x"}}'\n`,
      error: (d) =>
        `[invalid_argument] exec plugin ${d}/plugin.sh (user "u"): output: status: clientKeyData: missing (a client certificate needs its key)`,
    },
    {
      name: "a token that is not a string",
      script: `#!/bin/sh\necho '{"apiVersion":"${V1}","kind":"ExecCredential","status":{"token":7}}'\n`,
      error: (d) => `[invalid_argument] exec plugin ${d}/plugin.sh (user "u"): output: status.token: 7 must be a string`,
    },
    {
      name: "a bad expirationTimestamp",
      script: `#!/bin/sh\necho '{"apiVersion":"${V1}","kind":"ExecCredential","status":{"token":"t","expirationTimestamp":"tomorrow"}}'\n`,
      error: (d) =>
        `[invalid_argument] exec plugin ${d}/plugin.sh (user "u"): output: status.expirationTimestamp: "tomorrow" is not an RFC 3339 time`,
    },
    {
      name: "a command that is not installed: the install hint",
      script: "",
      user: { exec: { apiVersion: V1, command: "kpng-test-no-such-plugin", installHint: "get it from example.com\nand put it on PATH" } },
      error: () => `[unavailable] exec plugin kpng-test-no-such-plugin (user "u"): cannot run: ENOENT (get it from example.com)`,
    },
  ];
  for (const c of cases) {
    test(c.name, async () => {
      const { path, dir } = kubeconfig(
        apiCluster(),
        c.user ?? { exec: { apiVersion: V1, command: "./plugin.sh" } },
        c.script ? { "plugin.sh": c.script } : {},
      );
      const access = loadKubeConfig({ kubeconfig: path });
      const before = api.requests.length;
      let message = "";
      await nodesVia(access).catch((err: Error) => (message = err.message));
      expect(message).toBe(c.error(dir));
      expect(api.requests.length).toBe(before); // nothing was sent
    });
  }
});

describe("bad kubeconfigs: one line naming the file, the field and why (exit 2)", () => {
  /** the kubeconfig as text; CLUSTER and USER hold the working cluster and user */
  const CLUSTER = `{ server: "https://127.0.0.1:6443", certificate-authority-data: ${b64(makeTestCert(mkdtempSync(join(tmp.dir, "bad-ca-"))).cert)} }`;
  const doc = (clusters: string, users: string, contexts = "[{ name: ctx, context: { cluster: c, user: u } }]", current = "ctx") =>
    `apiVersion: v1\nkind: Config\nclusters: ${clusters}\nusers: ${users}\ncontexts: ${contexts}\ncurrent-context: ${current}\n`;
  const withUser = (user: string) => doc(`[{ name: c, cluster: ${CLUSTER} }]`, `[{ name: u, user: ${user} }]`);
  const withCluster = (cluster: string) => doc(`[{ name: c, cluster: ${cluster} }]`, "[{ name: u, user: { token: t } }]");

  const cases: Array<{ name: string; text: string; files?: Record<string, string>; error: (dir: string) => string }> = [
    {
      name: "not YAML",
      text: "clusters: [\n",
      error: () => "not valid YAML (line 2): Flow sequence in block collection must be sufficiently indented and end with a ]",
    },
    { name: "empty", text: "", error: () => "the file is empty" },
    { name: "a list, not a mapping", text: "- a\n- b\n", error: () => "not a kubeconfig (a mapping with clusters, contexts and users)" },
    {
      name: "another kind of file",
      text: "apiVersion: v1\nkind: KubeProxyConfiguration\n",
      error: () => 'kind: "KubeProxyConfiguration" must be "Config"',
    },
    { name: "clusters not a list", text: "clusters: c\n", error: () => 'clusters: "c" must be a list' },
    { name: "a user's token is a number", text: withUser("{ token: 42 }"), error: () => "users[0].user.token: 42 must be a string" },
    {
      name: "insecure-skip-tls-verify is a string",
      text: withCluster('{ server: "https://x", insecure-skip-tls-verify: "yes" }'),
      error: () => 'clusters[0].cluster.insecure-skip-tls-verify: "yes" must be true or false',
    },
    { name: "a context without a name", text: doc("[]", "[]", "[{ context: { cluster: c } }]"), error: () => "contexts[0].name: missing" },
    {
      name: "an exec plugin without a command",
      text: withUser(`{ exec: { apiVersion: ${V1} } }`),
      error: () => "users[0].user.exec.command: missing",
    },
    {
      name: "an exec plugin of a removed API version",
      text: withUser("{ exec: { apiVersion: client.authentication.k8s.io/v1alpha1, command: x } }"),
      error: () => `users[0].user.exec.apiVersion: "client.authentication.k8s.io/v1alpha1" must be one of: ${V1}, ${V1BETA1}`,
    },
    {
      name: "an exec env without a name",
      text: withUser(`{ exec: { apiVersion: ${V1}, command: x, env: [{ value: v }] } }`),
      error: () => "users[0].user.exec.env[0].name: missing",
    },
    {
      name: "a cluster name used twice",
      text: doc(`[{ name: c, cluster: ${CLUSTER} }, { name: c, cluster: ${CLUSTER} }]`, "[]"),
      error: () => 'clusters[1].name: "c" is used twice',
    },
    {
      name: "current-context not set",
      text: doc("[]", "[]", "[]", '""'),
      error: () => 'no cluster for current-context "" (current-context is not set)',
    },
    {
      name: "current-context names no context",
      text: doc("[]", "[]", "[]", "gone"),
      error: () => 'no cluster for current-context "gone" (no context has that name)',
    },
    {
      name: "the context names no cluster",
      text: doc("[]", "[]"),
      error: () => 'no cluster for current-context "ctx" (its cluster "c" is not in clusters)',
    },
    {
      name: "the context names no user",
      text: doc(`[{ name: c, cluster: ${CLUSTER} }]`, "[]"),
      error: () => 'no user for current-context "ctx" (its user "u" is not in users)',
    },
    { name: "no server", text: withCluster("{ insecure-skip-tls-verify: true }"), error: () => 'cluster "c": server: missing' },
    {
      name: "a server that is not a URL",
      text: withCluster('{ server: "10.0.0.1:6443" }'),
      error: () => 'cluster "c": server: "10.0.0.1:6443" is not an http(s) URL',
    },
    {
      name: "a CA file that is not there",
      text: withCluster('{ server: "https://x", certificate-authority: pki/ca.crt }'),
      error: (d) => `cluster "c": certificate-authority: cannot read ${d}/pki/ca.crt: ENOENT`,
    },
    {
      name: "CA data that is not base64",
      text: withCluster('{ server: "https://x", certificate-authority-data: "not base64!" }'),
      error: () => 'cluster "c": certificate-authority-data: not base64',
    },
    {
      name: "CA data that is not PEM",
      text: withCluster(`{ server: "https://x", certificate-authority-data: ${b64("hello")} }`),
      error: () => 'cluster "c": certificate-authority-data: not a PEM certificate',
    },
    {
      name: "a CA file that is not PEM",
      text: withCluster('{ server: "https://x", certificate-authority: ca.crt }'),
      files: { "ca.crt": "hello" },
      error: () => 'cluster "c": certificate-authority: not a PEM certificate',
    },
    {
      name: "insecure-skip-tls-verify with a CA",
      text: withCluster(
        `{ server: "https://x", insecure-skip-tls-verify: true, certificate-authority-data: ${b64(testCert(tmp.dir).cert)} }`,
      ),
      error: () => 'cluster "c": insecure-skip-tls-verify: cannot be combined with a certificate authority',
    },
    {
      name: "proxy-url",
      text: withCluster('{ server: "https://x", proxy-url: "http://proxy:3128" }'),
      error: () => 'cluster "c": proxy-url: "http://proxy:3128" is not supported by kpng (it connects to the API server directly)',
    },
    {
      name: "an auth-provider",
      text: withUser("{ auth-provider: { name: gcp, config: { cmd-path: gcloud } } }"),
      error: () => 'user "u": auth-provider: "gcp" is not supported by kpng (use a token, a client certificate or an exec plugin)',
    },
    {
      name: "impersonation (as)",
      text: withUser("{ token: t, as: admin }"),
      error: () => 'user "u": as: impersonation is not supported by kpng',
    },
    {
      name: "impersonation (as-groups)",
      text: withUser("{ token: t, as-groups: [system:masters] }"),
      error: () => 'user "u": as-groups: impersonation is not supported by kpng',
    },
    {
      name: "a token and a password",
      text: withUser("{ token: t, username: a, password: b }"),
      error: () => 'user "u": username: cannot be combined with a token (one authentication method only)',
    },
    {
      name: "a client certificate without its key",
      text: withUser("{ client-certificate: tls.crt }"),
      files: { "tls.crt": testCert(tmp.dir).cert },
      error: () => 'user "u": client-key: missing (client-certificate needs its key)',
    },
    {
      name: "a client key that is not PEM",
      text: withUser(`{ client-certificate-data: ${b64(testCert(tmp.dir).cert)}, client-key-data: ${b64("hello")} }`),
      error: () => 'user "u": client-key-data: not a PEM private key',
    },
    {
      name: "a token file that is not there",
      text: withUser("{ tokenFile: token }"),
      error: (d) => `user "u": tokenFile: cannot read ${d}/token: ENOENT`,
    },
    {
      name: "an empty token file",
      text: withUser("{ tokenFile: token }"),
      files: { token: "\n" },
      error: (d) => `user "u": tokenFile: ${d}/token is empty`,
    },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const dir = mkdtempSync(join(tmp.dir, "bad-"));
      for (const [f, text] of Object.entries(c.files ?? {})) writeFileSync(join(dir, f), text);
      const path = join(dir, "kubeconfig");
      writeFileSync(path, c.text);
      expect(invalidMessage(() => loadKubeConfig({ kubeconfig: path }))).toBe(`[invalid_argument] --kubeconfig ${path}: ${c.error(dir)}`);
    });
  }

  test("what only another user or cluster has is no error: only the current context is checked (client-go)", async () => {
    const path = join(mkdtempSync(join(tmp.dir, "others-")), "kubeconfig");
    const mine = readFileSync(api.writeKubeconfig(tmp.dir, "others-base"), "utf8");
    writeFileSync(
      path,
      mine
        .replace("users:\n", "users:\n- name: gke\n  user: { auth-provider: { name: gcp } }\n")
        .replace("clusters:\n", 'clusters:\n- name: proxied\n  cluster: { server: "https://y", proxy-url: "http://proxy:3128" }\n'),
    );
    expect(await nodesVia(loadKubeConfig({ kubeconfig: path }))).toEqual(["node-1"]);
  });

  test("in a pod without the cluster CA", () => {
    const prefix = mkdtempSync(join(tmp.dir, "pod-no-ca-"));
    const sa = join(prefix, "var/run/secrets/kubernetes.io/serviceaccount");
    mkdirSync(sa, { recursive: true });
    writeFileSync(join(sa, "token"), "t");
    const env = { KUBERNETES_SERVICE_HOST: "127.0.0.1", KUBERNETES_SERVICE_PORT: "443" };
    expect(invalidMessage(() => loadKubeConfig({ env, inClusterPrefix: prefix }))).toBe(
      "[invalid_argument] in-cluster configuration: no cluster CA at /var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
    );
  });
});
