// The API over TLS as deployed: `kpng serve` with the flags an operator
// passes, reading the real kube-apiserver (test/harness/kube-apiserver.ts,
// examples/cluster.yaml applied with kubectl), read by `buf curl` (a Go gRPC
// client: ALPN h2, its own TLS stack) and followed by node agents and
// sidecars with their TLS flags; a brain that checks agents' ServiceAccount
// tokens (minted by the API server: `kubectl create token`) with TokenReview,
// as its own ServiceAccount bound by deploy/global.yaml's
// system:auth-delegator binding; and the flags' bad input, each one line and
// exit code 2 (those need no API server and run without the real binaries).

import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { copyFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import YAML, { parseAllDocuments } from "yaml";
import { TOKEN_AUDIENCE } from "../../src/core/api/server/token-review.ts";
import { bufCurl as bufCurlAt } from "../harness/buf-curl.ts";
import { LOADED_WAIT_MS, nftDryRun, ROOT, settled, startKpng, startServe, tempDir, type KpngProcess } from "../harness/kpng-process.ts";
import { makeTestCert } from "../harness/api-server.ts";
import { agentTls as agentTlsIn, listenTls, makeMutualTls } from "../harness/tls-flags.ts";
import { haveK8s, type K8sObject, type KubeApiServer, sharedApiServer } from "../harness/kube-apiserver.ts";

// a test waits on its conditions up to LOADED_WAIT_MS each: 30 s + 60 s a wait, two by default
setDefaultTimeout(150_000);
const dir = tempDir("kpng-global-tls-");
const input = join(dir.path, "cluster.yaml");
const f = (name: string) => join(dir.path, name);
const AGENT_USER = "system:serviceaccount:kube-system:kpng-agent";
let mtls: KpngProcess & { addresses: Array<{ kind: string; port?: number }> };
let port = 0;
const real = haveK8s("kpng serve behind TLS against the real kube-apiserver");
let api: KubeApiServer;
/** kube-proxy's kubeconfig (system:node-proxier), the test process's address of the API server */
let kubeconfig = "";
/** `kpng serve`'s source: the real API server, with kube-proxy's rights */
const source = () => ["--kubeconfig", kubeconfig];
/** `kpng serve` for node-1 over mutual TLS (test/harness/tls-flags.ts) with the files in `at` */
const serveTls = (at: string, clientCA?: string, listen = "tcp://127.0.0.1:0") =>
  startServe([...source(), "--node-name", "node-1", "--listen", listen, ...listenTls(at, clientCA)]);

beforeAll(async () => {
  dir.create();
  copyFileSync(join(ROOT, "examples/cluster.yaml"), input);
  makeMutualTls(dir.path);
  if (!real) return;
  api = await sharedApiServer();
  await api.apply(...(YAML.parse(await Bun.file(input).text()) as { items: K8sObject[] }).items);
  kubeconfig = api.writeKubeconfig(f("kubeconfig"));
  mtls = await serveTls(dir.path);
  port = mtls.addresses[0].port!;
}, 150_000);
afterAll(async () => {
  await mtls?.stop();
  dir.remove();
});

const agentTls = () => agentTlsIn(dir.path);

async function run(args: string[], timeoutMs = LOADED_WAIT_MS): Promise<{ code: number; out: string; err: string }> {
  const p = startKpng(args);
  const timer = setTimeout(() => p.proc.kill("SIGKILL"), timeoutMs);
  const code = await p.proc.exited;
  clearTimeout(timer);
  await Bun.sleep(20); // let the pumps drain
  return { code, out: p.stdout.join("\n"), err: p.stderr.join("\n") };
}

/** A value from the process's /metrics (its address from the log). */
async function metric(p: KpngProcess, re: RegExp): Promise<number> {
  const address = /serving metrics address=(\S+)/.exec(await p.waitFor(/serving metrics address=/))![1];
  const text = await (await fetch(`http://${address}/metrics`)).text();
  return Number(re.exec(text)?.[1] ?? -1);
}

/** buf curl over TLS to the brain on `to` (test/harness/buf-curl.ts) */
const bufCurl = (args: string[], path: string, data: string, to = port) => bufCurlAt(`https://127.0.0.1:${to}${path}`, data, args);

describe.skipIf(!real)("buf curl (Go gRPC over TLS, ALPN h2) against kpng serve with mutual TLS", () => {
  test("with the agent's certificate: the global stream, Reset first and Sync last", async () => {
    const r = await bufCurl(["--cacert", f("brain.crt"), "--cert", f("agent.crt"), "--key", f("agent.key")], "/globalv1.Sets/Watch", "{}");
    expect(r.err).toBe("");
    expect(r.code).toBe(0);
    const messages = JSON.parse(`[${r.out.trim().replace(/\n}\n{/g, "},{")}]`) as unknown[];
    expect(messages[0]).toEqual({ Reset: {} });
    expect(messages.at(-1)).toEqual({ Sync: {} });
    expect(messages.length).toBeGreaterThan(10);
  });

  test("without a client certificate: unauthenticated, and the brain logs the refusal", async () => {
    const r = await bufCurl(["--cacert", f("brain.crt")], "/localv1.Endpoints/Next", '{"NodeName":"node-1"}');
    expect(r.code).not.toBe(0);
    expect(r.out + r.err).toContain('"code": "unauthenticated"');
    expect(r.out + r.err).toContain("no credentials: a client certificate signed by the client CA is required");
    await mtls.waitFor(/WARN kpng\/api: refused API client .*reason=no_credentials/);
  });

  test("trusting another CA: buf curl refuses the brain", async () => {
    const r = await bufCurl(
      ["--cacert", f("agents-ca.crt"), "--cert", f("agent.crt"), "--key", f("agent.key")],
      "/localv1.Endpoints/Next",
      '{"NodeName":"node-1"}',
    );
    expect(r.code).not.toBe(0);
    expect(r.out + r.err).toMatch(/certificate/);
  });
});

describe.skipIf(!real)("node agents and sidecars over TLS", () => {
  test("kpng --api tcp://… with --tls-ca/--tls-crt/--tls-key prints the full binary's nft transaction", async () => {
    const [agent, full] = await Promise.all([
      run(["--api", `tcp://127.0.0.1:${port}`, ...agentTls(), "--node-name", "node-2", "--backend", "nft", "--dry-run", "--once"]),
      run([...source(), "--node-name", "node-2", "--backend", "nft", "--dry-run", "--once"]),
    ]);
    expect(agent.err).toContain("following brain");
    expect(agent.code).toBe(0);
    expect(agent.out).toContain("add table");
    expect(agent.out).toBe(full.out);
  });

  test("kpng backend --api tcp://… with the TLS flags (a sidecar) applies the node's state", async () => {
    const r = await run([
      "backend",
      "--api",
      `tcp://127.0.0.1:${port}`,
      ...agentTls(),
      "--node-name",
      "node-1",
      "--backend",
      "nft",
      "--dry-run",
      "--once",
    ]);
    expect(r.code).toBe(0);
    expect(r.out).toContain("add table");
  });

  test("a process on the client library (examples/plugins/print-changes.ts) with the TLS flags", async () => {
    const p = Bun.spawn(
      [
        join(ROOT, "node_modules/.bin/bun"),
        join(ROOT, "examples/plugins/print-changes.ts"),
        "--api",
        `tcp://127.0.0.1:${port}`,
        ...agentTls(),
        "--node-name",
        "node-1",
        "--once",
      ],
      { cwd: ROOT, stdout: "pipe", stderr: "pipe" },
    );
    const timer = setTimeout(() => p.kill("SIGKILL"), LOADED_WAIT_MS);
    const [out, code] = [await new Response(p.stdout).text(), await p.exited];
    clearTimeout(timer);
    expect(code).toBe(0);
    expect(out).toMatch(/^rev=1 node=node-1 services=\d+ endpoints=\d+ changed=all$/m);
  });

  test("an agent without a certificate: refused with the brain's reason, keeps trying, nothing printed", async () => {
    const agent = startKpng(["--api", `tcp://127.0.0.1:${port}`, "--tls-ca", f("brain.crt"), ...nftDryRun("node-1")]);
    try {
      const lines = await agent.waitForCount(/$^/, 0, 1); // nothing on stdout yet
      expect(lines).toEqual([]);
      await agent.waitFor(
        /global stream failed.*\[unauthenticated\] no credentials: a client certificate signed by the client CA is required/,
      );
      expect(await metric(agent, /^kpng_global_refused_total (\d+)/m)).toBeGreaterThan(0);
      // it keeps trying (backoff), and never programs anything
      const tries = () => agent.stderr.filter((l) => l.includes("[unauthenticated]")).length;
      const first = tries();
      // another refusal comes after the agent's backoff (up to 5 s, longer on a loaded machine)
      for (const deadline = Date.now() + LOADED_WAIT_MS; tries() <= first && Date.now() < deadline; ) await Bun.sleep(100);
      expect(tries()).toBeGreaterThan(first);
      expect(agent.stdout.join("")).toBe("");
    } finally {
      await agent.stop();
    }
  }, 210_000);
});

describe.skipIf(!real)("an agent its brain starts refusing", () => {
  test("keeps its rules untouched while refused, keeps trying, and resyncs as a diff once let in again", async () => {
    makeTestCert(dir.path, { san: "DNS:other-agents", name: "other-ca" });
    const serveWith = (clientCA: string, listen?: string) => serveTls(dir.path, clientCA, listen);
    let brain = await serveWith(f("agents-ca.crt"));
    const listen = `tcp://127.0.0.1:${(brain.addresses[0] as { port: number }).port}`;
    const agent = startKpng(["--api", listen, ...agentTls(), ...nftDryRun("node-1")]);
    try {
      await agent.waitFor(/synced backend=nft rev=1 /);
      const printed = await settled(agent.stdout); // the log line (stderr) can overtake the transaction (stdout)
      const syncs = () => agent.stderr.filter((l) => /synced backend=nft/.test(l)).length;
      const synced = syncs();
      // the same brain, restarted trusting another CA only: this agent's certificate is refused
      await brain.stop();
      brain = await serveWith(join(dir.path, "other-ca.crt"), listen);
      await agent.waitFor(/global stream failed.*\[unauthenticated\] client certificate refused/);
      const refusals = () => agent.stderr.filter((l) => l.includes("client certificate refused")).length;
      const first = refusals();
      await brain.waitFor(/refused API client .*reason=bad_certificate/);
      // Still trying: another refusal comes, after the agent's backoff (up to 5 s, longer on a loaded machine).
      for (const deadline = Date.now() + LOADED_WAIT_MS; refusals() <= first && Date.now() < deadline; ) await Bun.sleep(100);
      expect(refusals()).toBeGreaterThan(first);
      expect(agent.stdout.length).toBe(printed); // nothing applied meanwhile
      expect(syncs()).toBe(synced);
      // let in again: it follows the brain, and the unchanged cluster changes nothing
      await brain.stop();
      brain = await serveWith(f("agents-ca.crt"), listen);
      await agent.waitFor(/following brain .*resync=true changed=0/);
      expect(syncs()).toBe(synced);
    } finally {
      await agent.stop();
      await brain.stop();
    }
  }, 450_000);
});

describe.skipIf(!real)("a brain that checks ServiceAccount tokens (--listen-token-review)", () => {
  let brain: KpngProcess & { addresses: Array<{ kind: string; port?: number }> };
  beforeAll(async () => {
    // the brain's ServiceAccount with deploy/rbac.yaml's rights, and
    // deploy/global.yaml's identities: the agents' ServiceAccount, the brain's
    // delegated-authentication binding
    const manifest = parseAllDocuments(await Bun.file(join(ROOT, "deploy/global.yaml")).text()).map((d) => d.toJS() as K8sObject);
    const want = (kind: string, name: string) => manifest.find((o) => o.kind === kind && o.metadata.name === name)!;
    const rbac = parseAllDocuments(await Bun.file(join(ROOT, "deploy/rbac.yaml")).text()).map((d) => d.toJS() as K8sObject);
    await api.apply(...rbac, want("ServiceAccount", "kpng-agent"), want("ClusterRoleBinding", "kpng-brain-auth-delegator"));
    const token = async (sa: string, audience?: string) =>
      (await api.kubectl(["create", "token", sa, "-n", "kube-system", ...(audience ? ["--audience", audience] : [])])).trim();
    writeFileSync(f("token"), `${await token("kpng-agent", TOKEN_AUDIENCE)}\n`);
    writeFileSync(f("pod-token"), await token("kpng-agent"));
    // the brain's kubeconfig: its own ServiceAccount's token
    const kc = JSON.parse(await Bun.file(api.writeKubeconfig(f("brain.kubeconfig"))).text());
    kc.users[0].user.token = await token("kpng");
    writeFileSync(f("brain.kubeconfig"), JSON.stringify(kc), { mode: 0o600 });
    brain = await startServe([
      "--kubeconfig",
      f("brain.kubeconfig"),
      "--node-name",
      "node-1",
      "--listen",
      "tcp://127.0.0.1:0",
      "--listen-tls-crt",
      f("brain.crt"),
      "--listen-tls-key",
      f("brain.key"),
      "--listen-token-review",
      AGENT_USER,
      "--metrics-bind-address",
      "127.0.0.1:0",
    ]);
  }, 150_000);
  afterAll(async () => {
    await brain?.stop();
    await api?.kubectl(["delete", "clusterrolebinding", "kpng-brain-auth-delegator", "kpng", "--ignore-not-found"]);
  });
  /** `kpng local` for node-3 against this brain, trusting its certificate, with the token in `file` */
  const localWithToken = (file: string) => [
    "local",
    "--api",
    `tcp://127.0.0.1:${brain.addresses[0].port}`,
    "--tls-ca",
    f("brain.crt"),
    "--token-file",
    file,
    "--node-name",
    "node-3",
  ];

  test("an agent with its projected token (--token-file) computes what the full binary does on the same API server", async () => {
    const [agent, full] = await Promise.all([run(localWithToken(f("token"))), run(["local", ...source(), "--node-name", "node-3"])]);
    expect(agent.code).toBe(0);
    expect(JSON.parse(agent.out).services.length).toBeGreaterThan(0);
    expect(agent.out).toBe(full.out);
    // (no client CA here: only the API server's TokenReview can have let this token in)
  });

  test("kpng get with the same --tls-ca and --token-file: the brain's view of a node; a pod token refused with the reason", async () => {
    const server = ["--server", `tcp://127.0.0.1:${brain.addresses[0].port}`, "--tls-ca", f("brain.crt")];
    const get = await run(["get", "services", "-o", "json", "--node-name", "node-3", ...server, "--token-file", f("token")]);
    expect(get.code).toBe(0);
    expect(JSON.parse(get.out).nodeName).toBe("node-3");
    expect(JSON.parse(get.out).services.length).toBeGreaterThan(0);
    const refused = await run(["get", "services", "--node-name", "node-3", ...server, "--token-file", f("pod-token")]);
    expect(refused.code).toBe(1);
    expect(refused.err).toMatch(/answered unauthenticated: .*token audiences .* is invalid for the target audiences/);
  });

  test("an ordinary pod token: refused on both sides with the API server's reason", async () => {
    const agent = startKpng(localWithToken(f("pod-token")));
    try {
      await agent.waitFor(
        /global stream failed.*\[unauthenticated\] token rejected by the API server: .*token audiences .* is invalid for the target audiences/,
      );
      await brain.waitFor(/refused API client .*reason=token_rejected/);
      expect(await metric(brain, /^kpng_listen_refused_total\{reason="token_rejected"\} (\d+)/m)).toBeGreaterThan(0);
    } finally {
      await agent.stop();
    }
  }, 210_000);
});

describe.skipIf(!real)("deploy/global-certs.sh: the openssl recipe the manifests mount", () => {
  test("its brain certificate serves, its CA verifies it, its agent certificate is let in", async () => {
    const out = join(dir.path, "recipe");
    const script = Bun.spawn(["sh", join(ROOT, "deploy/global-certs.sh"), out], {
      env: { ...process.env, BRAIN_NAMES: "kpng-brain-0.cluster.example", BRAIN_IPS: "127.0.0.1", DAYS: "1" },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [text, code] = [await new Response(script.stdout).text(), await script.exited];
    expect(code).toBe(0);
    expect(text).toContain("kubectl -n kube-system create secret generic kpng-brain-tls");
    const r = (name: string) => join(out, name);
    const brain = await serveTls(out, r("ca.crt"));
    const brainPort = (brain.addresses[0] as { port: number }).port;
    try {
      const api = `tcp://127.0.0.1:${brainPort}`;
      const ok = await run(["local", "--api", api, ...agentTlsIn(out, r("ca.crt")), "--node-name", "node-1"]);
      expect(ok.code).toBe(0);
      expect(JSON.parse(ok.out).services.length).toBeGreaterThan(0);
      // the certificate names 127.0.0.1, not "localhost": dialled by that name, the agent refuses the brain
      const wrong = startKpng(["local", "--api", `tcp://localhost:${brainPort}`, ...agentTlsIn(out, r("ca.crt")), "--node-name", "node-1"]);
      try {
        await wrong.waitFor(/TLS handshake failed \(ERR_TLS_CERT_ALTNAME_INVALID\)/);
      } finally {
        await wrong.stop();
      }
    } finally {
      await brain.stop();
    }
  }, 210_000);
});

describe.skipIf(!real)("rotation as deployed: a new certificate written over the files", () => {
  test("the brain serves it without a restart; the agent's open stream stays up and gets the next change", async () => {
    const out = join(dir.path, "rotation");
    const certs = async () => {
      const p = Bun.spawn(["sh", join(ROOT, "deploy/global-certs.sh"), out], {
        env: { ...process.env, BRAIN_IPS: "127.0.0.1", DAYS: "1" },
        stdout: "ignore",
        stderr: "pipe",
      });
      expect(await p.exited).toBe(0);
    };
    await certs();
    const r = (name: string) => join(out, name);
    const brain = await serveTls(out, r("ca.crt"));
    const brainPort = (brain.addresses[0] as { port: number }).port;
    const agent = startKpng(["--api", `tcp://127.0.0.1:${brainPort}`, ...agentTlsIn(out, r("ca.crt")), ...nftDryRun("node-1")]);
    try {
      await agent.waitFor(/synced backend=nft rev=1 /);
      const served = await Bun.file(r("brain.crt")).text();
      await certs(); // same CA, a new certificate and key for the brain
      expect(await Bun.file(r("brain.crt")).text()).not.toBe(served);
      await brain.waitFor(/API certificate reloaded/);
      const curl = await bufCurl(
        ["--cacert", r("ca.crt"), "--cert", r("agent.crt"), "--key", r("agent.key")],
        "/localv1.Endpoints/Next",
        '{"NodeName":"node-1"}',
        brainPort,
      );
      expect(curl.code).toBe(0);
      // what a new connection is served is the new certificate (openssl's own client)
      const serial = async (cmd: string) =>
        (await new Response(Bun.spawn(["sh", "-c", cmd], { stdout: "pipe", stderr: "ignore" }).stdout).text()).trim();
      const onDisk = await serial(`openssl x509 -in ${r("brain.crt")} -noout -serial`);
      expect(onDisk).toMatch(/^serial=/);
      expect(await serial(`openssl s_client -connect 127.0.0.1:${brainPort} </dev/null | openssl x509 -noout -serial`)).toBe(onDisk);
      // a change after the rotation reaches the agent on the stream it opened before
      await api.kubectl([
        "patch",
        "endpointslice",
        "web-abc12",
        "-n",
        "shop",
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/ports/0/port","value":8081}]',
      ]);
      await agent.waitFor(/synced backend=nft rev=2 /);
      expect(agent.stderr.filter((l) => l.includes("global stream failed"))).toEqual([]);
      expect(agent.stderr.filter((l) => l.includes("following brain"))).toHaveLength(1);
    } finally {
      await agent.stop();
      await brain.stop();
    }
  }, 330_000);
});

describe("bad TLS flags: one line naming the flag, exit code 2", () => {
  const listen = ["serve", "--input", input, "--listen", "tcp://127.0.0.1:0"];
  const cases: Array<{ name: string; args: () => string[]; want: RegExp }> = [
    {
      name: "a certificate without its key",
      args: () => [...listen, "--listen-tls-crt", f("brain.crt")],
      want: /flag --listen-tls-key: required with --listen-tls-crt/,
    },
    {
      name: "a client CA without a server certificate",
      args: () => [...listen, "--listen-tls-ca", f("agents-ca.crt")],
      want: /flag --listen-tls-crt: required with --listen-tls-ca/,
    },
    {
      name: "a certificate file that does not exist",
      args: () => [...listen, "--listen-tls-crt", f("nope.crt"), "--listen-tls-key", f("brain.key")],
      want: /flag --listen-tls-crt: .*nope.crt: cannot read: ENOENT/,
    },
    {
      name: "a key that does not match the certificate",
      args: () => [...listen, "--listen-tls-crt", f("brain.crt"), "--listen-tls-key", f("agent.key")],
      want: /flag --listen-tls-crt\/--listen-tls-key: .*KEY_VALUES_MISMATCH/,
    },
    {
      name: "a client CA that is not PEM",
      args: () => [...listen, "--listen-tls-crt", f("brain.crt"), "--listen-tls-key", f("brain.key"), "--listen-tls-ca", input],
      want: /flag --listen-tls-ca: .*cluster.yaml: not a PEM certificate bundle/,
    },
    {
      name: "token review without API-server access",
      args: () => [...listen, "--listen-tls-crt", f("brain.crt"), "--listen-tls-key", f("brain.key"), "--listen-token-review", AGENT_USER],
      want: /flag --listen-token-review: requires access to the API server/,
    },
    {
      name: "token review without TLS",
      args: () => ["serve", "--listen", "tcp://127.0.0.1:0", "--listen-token-review", AGENT_USER],
      want: /flag --listen-token-review: requires TLS/,
    },
    {
      name: "TLS flags with only a unix socket to serve",
      args: () => [
        "serve",
        "--input",
        input,
        "--listen",
        `unix://${f("x.sock")}`,
        "--listen-tls-crt",
        f("brain.crt"),
        "--listen-tls-key",
        f("brain.key"),
      ],
      want: /flag --listen-tls-crt: no tcp:\/\/ --listen/,
    },
    {
      name: "an agent in plaintext to a brain off loopback",
      args: () => ["local", "--api", "tcp://192.0.2.10:12090", "--node-name", "node-1"],
      want: /flag --api: "tcp:\/\/192.0.2.10:12090" is not a loopback address: connect with TLS/,
    },
    {
      name: "an agent's token file that does not exist",
      args: () => ["local", "--api", "tcp://192.0.2.10:12090", "--token-file", f("nope"), "--node-name", "node-1"],
      want: /flag --token-file: .*nope: cannot read: ENOENT/,
    },
    {
      name: "a sidecar's client certificate without its key",
      args: () => ["backend", "--api", "tcp://127.0.0.1:1", "--tls-crt", f("agent.crt"), "--backend", "nft", "--dry-run"],
      want: /flag --tls-key: required with --tls-crt/,
    },
  ];
  for (const c of cases) {
    test(c.name, async () => {
      const r = await run(c.args());
      expect(r.code).toBe(2);
      const lines = r.err.trim().split("\n");
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(c.want);
    });
  }

  test("plaintext off loopback with --listen-any: served, with a WARN at start-up", async () => {
    const p = await startServe(["--input", input, "--listen", "tcp://0.0.0.0:0", "--listen-any"]);
    try {
      await p.waitFor(/WARN kpng\/api: serving the API in plaintext off loopback \(--listen-any\)/);
    } finally {
      await p.stop();
    }
  });
});
