// The API over TLS, in process but over real loopback TCP with openssl-made
// certificates: who may connect (client certificates, ServiceAccount tokens
// checked by TokenReview against the real kube-apiserver: tokens minted with
// `kubectl create token`, the brain's own ServiceAccount bound to
// system:auth-delegator as deploy/global.yaml binds it), how a refusal reads
// on both sides and is counted, and certificate rotation without a restart.
//
// The control plane is this suite's own (KubeApiServer.start()), not the
// shared one: one case stops its API server. Where the real binaries are
// absent the token cases skip (haveK8s); the certificate cases still run.

import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { copyFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connectGrpc, GrpcError, isRefusal, type ConnectOptions } from "../../../src/core/api/client/grpc.ts";
import { nextSnapshot, watchChangeSets } from "../../../src/core/api/client/streams.ts";
import { startApiServer, type ApiServer } from "../../../src/core/api/server/index.ts";
import { tokenReviewer, TOKEN_AUDIENCE } from "../../../src/core/api/server/token-review.ts";
import type { TlsMaterial } from "../../../src/core/api/tls/files.ts";
import type { Brain } from "../../../src/core/brain/brain.ts";
import { memoryLogger } from "../../../src/core/log.ts";
import { credentialSource } from "../../../src/core/sources/kube-credentials.ts";
import { kubeRequest } from "../../../src/core/kube-http/request.ts";
import { makeClientCert, makeTestCert, type TestCert } from "../../harness/api-server.ts";
import { haveK8s, KubeApiServer } from "../../harness/kube-apiserver.ts";
import { waitFor } from "../../sources/kube/helpers.ts";
import { brainWith, serviceObjects, upsert } from "../brain-fixture.ts";
import type { GenOptions } from "../gen-cluster.ts";
import { LOADED_WAIT_MS, tempDir } from "../../harness/kpng-process.ts";

// waits are bounded by their condition, up to LOADED_WAIT_MS each (issue 38: no test may depend
// on an idle machine): a test's own timeout leaves room for two
setDefaultTimeout(150_000);

const gen: GenOptions = { services: 4, endpoints: 2, nodes: 3 };
const AGENT_USER = "system:serviceaccount:kube-system:kpng-agent";
const dir = tempDir("kpng-tls-");
const log = memoryLogger();
let brain: Brain;
let server: ApiServer;
let kube: KubeApiServer | undefined;
const real = haveK8s("the brain's TokenReviews against the real kube-apiserver");
/** ServiceAccount tokens minted by the API server, by the names the cases use */
const tokens = new Map<string, string>();
/** TokenReviews the brain sent */
let reviews = 0;
let port = 0;
/** the brain's certificate (self-signed for IP:127.0.0.1: it is its own CA) and the CA that signs agents */
let brainCert: TestCert;
let clientCA: TestCert;
let agent: TestCert;
let rogue: TestCert;
let expired: TestCert;
const files = () => ({ crt: join(dir.path, "serving.crt"), key: join(dir.path, "serving.key"), ca: join(dir.path, "client-ca.crt") });

beforeAll(async () => {
  dir.create();
  brainCert = makeTestCert(dir.path, { name: "brain" });
  clientCA = makeTestCert(dir.path, { san: "DNS:kpng-client-ca", name: "client-ca-self" });
  agent = makeClientCert(dir.path, clientCA, "node-1", "agent");
  expired = makeClientCert(dir.path, clientCA, "node-1", "expired", -1);
  rogue = makeClientCert(dir.path, makeTestCert(dir.path, { san: "DNS:rogue-ca", name: "rogue-ca" }), "node-1", "rogue");
  writeFileSync(files().crt, brainCert.cert);
  writeFileSync(files().key, brainCert.key);
  writeFileSync(files().ca, clientCA.cert);
  brain = brainWith(gen);
  let auth: Parameters<typeof startApiServer>[0]["auth"];
  if (real) {
    kube = await KubeApiServer.start();
    await mintTokens(kube);
    const access = {
      server: kube.url,
      tls: { ca: kube.ca, insecure: false },
      credentials: credentialSource({ token: tokens.get("brain") }),
    };
    const request = kubeRequest(access);
    auth = {
      tokens: tokenReviewer({
        request: (opts) => {
          if (opts.path.endsWith("/tokenreviews")) reviews++;
          return request(opts);
        },
        users: [AGENT_USER],
      }),
    };
  }
  server = await startApiServer({
    brain,
    listen: ["tcp://127.0.0.1:0"],
    tls: { files: files(), reloadMs: 100 },
    auth,
    defaultNodeName: "node-1",
    log,
  });
  port = (server.addresses[0] as { port: number }).port;
}, 120_000);
afterAll(async () => {
  await server?.close();
  await kube?.close();
  dir.remove();
});

/**
 * The brain's identity (ServiceAccount kube-system/kpng, bound to
 * system:auth-delegator) and the tokens agents and others present: the
 * agent's ServiceAccount for the audience kpng (several: each is a new token
 * to the brain's cache), the same account's ordinary pod token (the API
 * server's audience), another ServiceAccount's for kpng.
 */
async function mintTokens(k: KubeApiServer) {
  await k.kubectl(["create", "serviceaccount", "kpng", "-n", "kube-system"]);
  await k.kubectl(["create", "serviceaccount", "kpng-agent", "-n", "kube-system"]);
  await k.kubectl(["create", "serviceaccount", "web", "-n", "default"]);
  await k.kubectl([
    "create",
    "clusterrolebinding",
    "kpng-brain-auth-delegator",
    "--clusterrole=system:auth-delegator",
    "--serviceaccount=kube-system:kpng",
  ]);
  const mint = async (name: string, sa: string, ns: string, audience?: string) =>
    tokens.set(name, (await k.kubectl(["create", "token", sa, "-n", ns, ...(audience ? ["--audience", audience] : [])])).trim());
  await mint("brain", "kpng", "kube-system");
  for (const name of ["agent-token", "agent-token-2", "agent-token-3", "cached-token"])
    await mint(name, "kpng-agent", "kube-system", TOKEN_AUDIENCE);
  await mint("pod-token", "kpng-agent", "kube-system");
  await mint("other-token", "web", "default", TOKEN_AUDIENCE);
}
const token = (name: string) => tokens.get(name) ?? name;

/** One Next call with these credentials: the number of services, or the error. */
async function next(opts: ConnectOptions, host = "127.0.0.1"): Promise<number | GrpcError> {
  const conn = connectGrpc({ kind: "tcp", host, port }, opts);
  try {
    const snap = await nextSnapshot(conn, { instanceID: 0n, rev: 0n, nodeName: "node-1" }, AbortSignal.timeout(10_000));
    return snap.entries.length;
  } catch (err) {
    return GrpcError.from(err, 2);
  } finally {
    conn.close();
  }
}

const tls = (m: TlsMaterial): ConnectOptions => ({ tls: m });

describe("who may connect", () => {
  const cases: Array<{
    name: string;
    opts: () => ConnectOptions;
    host?: string;
    /** needs the API server's tokens (skipped without the real binaries) */
    tokens?: boolean;
    refused?: { reason?: keyof ApiServer["refused"]; message: RegExp };
  }> = [
    {
      name: "a client certificate signed by the client CA: served",
      opts: () => tls({ ca: brainCert.cert, cert: agent.cert, key: agent.key }),
    },
    {
      name: "the agent's ServiceAccount token (audience kpng): served",
      opts: () => ({ ...tls({ ca: brainCert.cert }), token: token("agent-token") }),
      tokens: true,
    },
    {
      name: "neither certificate nor token: refused, no credentials",
      opts: () => tls({ ca: brainCert.cert }),
      refused: {
        reason: "no_credentials",
        message: real
          ? /^\[unauthenticated\] no credentials: a client certificate signed by the client CA or a ServiceAccount bearer token is required$/
          : /^\[unauthenticated\] no credentials: a client certificate signed by the client CA is required$/,
      },
    },
    {
      name: "a certificate of another CA: refused",
      opts: () => tls({ ca: brainCert.cert, cert: rogue.cert, key: rogue.key }),
      refused: { reason: "bad_certificate", message: /client certificate refused: / },
    },
    {
      name: "an expired certificate of the right CA: refused",
      opts: () => tls({ ca: brainCert.cert, cert: expired.cert, key: expired.key }),
      refused: { reason: "bad_certificate", message: /client certificate refused: CERT_HAS_EXPIRED/ },
    },
    {
      name: "an ordinary pod token (the API server's audience): refused",
      opts: () => ({ ...tls({ ca: brainCert.cert }), token: token("pod-token") }),
      tokens: true,
      refused: {
        reason: "token_rejected",
        message:
          /token rejected by the API server: .*token audiences \["https:\/\/kubernetes.default.svc"\] is invalid for the target audiences \["kpng"\]/,
      },
    },
    {
      name: "a token of another ServiceAccount: refused",
      opts: () => ({ ...tls({ ca: brainCert.cert }), token: token("other-token") }),
      tokens: true,
      refused: { reason: "token_rejected", message: /token of "system:serviceaccount:default:web" is not allowed/ },
    },
    {
      name: "an unknown token: refused",
      opts: () => ({ ...tls({ ca: brainCert.cert }), token: token("forged") }),
      tokens: true,
      refused: { reason: "token_rejected", message: /token rejected by the API server: invalid bearer token/ },
    },
    {
      name: "the agent does not trust the brain's CA: it refuses the brain",
      opts: () => tls({ ca: clientCA.cert, cert: agent.cert, key: agent.key }),
      refused: { message: /TLS handshake failed \(SELF_SIGNED_CERT_IN_CHAIN|DEPTH_ZERO_SELF_SIGNED_CERT\)/ },
    },
    {
      name: "the brain's certificate does not name the host the agent dialled: it refuses the brain",
      host: "localhost",
      opts: () => tls({ ca: brainCert.cert, cert: agent.cert, key: agent.key }),
      refused: { message: /TLS handshake failed \(ERR_TLS_CERT_ALTNAME_INVALID\)/ },
    },
  ];
  for (const c of cases) {
    test.skipIf(!!c.tokens && !real)(c.name, async () => {
      const before = { ...server.refused };
      const lines = log.lines.length;
      const r = await next(c.opts(), c.host);
      if (!c.refused) return expect(r).toBe(gen.services);
      expect(r).toBeInstanceOf(GrpcError);
      expect((r as GrpcError).message).toMatch(c.refused.message);
      expect(isRefusal(r)).toBe(true);
      if (!c.refused.reason) {
        // the brain's side: the client hung up mid-handshake, counted and logged
        await waitFor("the brain's log line", () =>
          log.lines.slice(lines).find((l) => l.includes("refused API client") && l.includes("reason=tls_handshake")),
        );
        expect(server.refused.tls_handshake).toBeGreaterThan(before.tls_handshake);
        return;
      }
      // the brain's side: counted by reason, one WARN line with the same reason
      expect(server.refused[c.refused.reason]).toBe(before[c.refused.reason] + 1);
      const logged = log.lines.slice(lines).filter((l) => l.includes("refused API client"));
      expect(logged).toHaveLength(1);
      expect(logged[0]).toContain(`reason=${c.refused.reason}`);
    });
  }

  test("Connect over HTTP/1.1 (ALPN http/1.1, Bun's fetch): served with the certificate; without, the stream ends unauthenticated", async () => {
    const json = Buffer.from(JSON.stringify({ NodeName: "node-1" }));
    const head = Buffer.from([0, 0, 0, 0, 0]);
    head.writeUInt32BE(json.length, 1);
    const call = async (tls: Record<string, string>) => {
      const res = await fetch(`https://127.0.0.1:${port}/localv1.Endpoints/Next`, {
        method: "POST",
        headers: { "content-type": "application/connect+json" },
        body: Buffer.concat([head, json]),
        tls,
      } as RequestInit);
      return `${res.status} ${await res.text()}`;
    };
    const served = await call({ ca: brainCert.cert, cert: agent.cert, key: agent.key });
    expect(served).toStartWith("200 ");
    expect(served).toContain('{"Next":{"InstanceID"');
    const refused = await call({ ca: brainCert.cert });
    expect(refused).toStartWith("200 ");
    expect(refused).toContain('{"error":{"code":"unauthenticated","message":"no credentials: ');
  });

  test("the brain's certificate has expired: the agent refuses the brain", async () => {
    const stale = makeTestCert(dir.path, { name: "stale", days: -1 });
    const other = await startApiServer({
      brain,
      listen: ["tcp://127.0.0.1:0"],
      tls: { files: { crt: join(dir.path, "stale.crt"), key: join(dir.path, "stale.key") } },
      defaultNodeName: "node-1",
      log: memoryLogger(),
    });
    try {
      const conn = connectGrpc(
        { kind: "tcp", host: "127.0.0.1", port: (other.addresses[0] as { port: number }).port },
        tls({ ca: stale.cert }),
      );
      const err = await nextSnapshot(conn, { instanceID: 0n, rev: 0n, nodeName: "node-1" }, AbortSignal.timeout(10_000)).then(
        () => null,
        (e) => GrpcError.from(e, 2),
      );
      conn.close();
      expect(err?.message).toMatch(/TLS handshake failed \(CERT_HAS_EXPIRED\)/);
      expect(isRefusal(err)).toBe(true);
    } finally {
      await other.close();
    }
  });

  test.skipIf(!real)("token answers are cached: ten connections with one token cost one TokenReview", async () => {
    const before = reviews;
    const results = await Promise.all(
      Array.from({ length: 10 }, () => next({ ...tls({ ca: brainCert.cert }), token: token("cached-token") })),
    );
    expect(results).toEqual(Array(10).fill(gen.services));
    expect(reviews - before).toBe(1);
  });

  test.skipIf(!real)(
    "the API server unreachable: refused as token_review_failed, served again once it answers",
    async () => {
      await kube!.stopApiServer();
      try {
        const r = await next({ ...tls({ ca: brainCert.cert }), token: token("agent-token-2") });
        expect((r as GrpcError).message).toMatch(/\[unauthenticated\] token review failed: /);
        expect(server.refused.token_review_failed).toBeGreaterThan(0);
      } finally {
        await kube!.startApiServer();
      }
      expect(await next({ ...tls({ ca: brainCert.cert }), token: token("agent-token-3") })).toBe(gen.services);
    },
    120_000,
  );
});

describe("certificate rotation without a restart", () => {
  test("new connections get the new certificate; an open Watch stays up and gets the next change", async () => {
    const creds = (ca: string) => tls({ ca, cert: agent.cert, key: agent.key });
    const conn = connectGrpc({ kind: "tcp", host: "127.0.0.1", port }, creds(brainCert.cert));
    const ac = new AbortController();
    const sets = watchChangeSets(conn, "node-1", ac.signal);
    try {
      expect((await sets.next()).value?.reset).toBe(true);
      const rotated = makeTestCert(join(dir.path), { name: "rotated" });
      copyFileSync(join(dir.path, "rotated.key"), files().key);
      copyFileSync(join(dir.path, "rotated.crt"), files().crt);
      await waitFor("the rotated certificate to be served", async () => (await next(creds(rotated.cert))) === gen.services, LOADED_WAIT_MS);
      expect(log.lines.some((l) => l.includes("API certificate reloaded"))).toBe(true);
      // the old certificate is no longer served to new connections
      expect(await next(creds(brainCert.cert))).toBeInstanceOf(GrpcError);
      // the stream opened before the rotation still delivers
      const [, slice] = serviceObjects(gen, 1);
      slice.endpoints[0].conditions.ready = false;
      upsert(brain, slice);
      const cs = await sets.next();
      expect(cs.value?.ops.length).toBeGreaterThan(0);
    } finally {
      ac.abort();
      conn.close();
    }
  });

  test("a half-written rotation (a key that does not match): WARN, the served certificate stays", async () => {
    const served = makeTestCert(dir.path, { name: "rotated" }); // what the previous test left in place has this name: re-read it
    writeFileSync(files().crt, served.cert);
    writeFileSync(files().key, served.key);
    await waitFor(
      "the certificate to be served",
      async () => (await next(tls({ ca: served.cert, cert: agent.cert, key: agent.key }))) === gen.services,
      LOADED_WAIT_MS,
    );
    const lines = log.lines.length;
    writeFileSync(files().key, makeTestCert(dir.path, { name: "stray" }).key);
    await waitFor(
      "a WARN about the files",
      () => log.lines.slice(lines).find((l) => l.includes("cannot be used: keeping the previous ones")),
      LOADED_WAIT_MS,
    );
    expect(await next(tls({ ca: served.cert, cert: agent.cert, key: agent.key }))).toBe(gen.services);
  });
});
