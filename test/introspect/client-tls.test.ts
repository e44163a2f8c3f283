// `kpng get` and `kpng verify` to a kpng whose TCP --listen is served with
// mutual TLS (--listen-tls-crt/-key/-ca): the client takes the same flags as
// a node agent's --api (--tls-ca, --tls-crt, --tls-key), read and checked by
// the same code. The whole process (--input, the drift-plugin backend) in a
// network namespace of its own; the CLI runs there too, as on the node.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { makeClientCert, makeTestCert } from "../harness/api-server.ts";
import { kpngCommand, ROOT, startKpng, tempDir, type KpngProcess } from "../harness/kpng-process.ts";
import { run } from "../harness/netns.ts";

describe("kpng get/verify over TLS: the --api client flags", () => {
  const dir = tempDir("kpng-client-tls-");
  const netns = `kptls${Math.random().toString(36).slice(2, 7)}`;
  const f = (name: string) => join(dir.path, name);
  const server = "tcp://127.0.0.1:12090";
  let proc: KpngProcess;

  /** the CLI inside the node namespace: its exit code and output */
  async function kpng(args: string[]): Promise<{ code: number; out: string; err: string }> {
    const p = Bun.spawn(["ip", "netns", "exec", netns, ...kpngCommand(), ...args], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
    const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
    return { code, out, err };
  }
  const tls = () => ["--tls-ca", f("kpng.crt"), "--tls-crt", f("operator.crt"), "--tls-key", f("operator.key")];

  beforeAll(async () => {
    dir.create();
    makeTestCert(dir.path, { name: "kpng" }); // for 127.0.0.1, its own CA
    const clientCA = makeTestCert(dir.path, { san: "DNS:kpng-operators", name: "operators-ca" });
    makeClientCert(dir.path, clientCA, "operator", "operator");
    makeClientCert(dir.path, makeTestCert(dir.path, { san: "DNS:strangers", name: "strangers-ca" }), "stranger", "stranger");
    writeFileSync(f("drifts.json"), "[]");
    await run(["ip", "netns", "add", netns]);
    await run(["ip", "-n", netns, "link", "set", "lo", "up"]);
    proc = startKpng(
      [
        ...["--input", "examples/cluster.yaml", "--node-name", "node-1"],
        ...["--plugin", join(import.meta.dir, "drift-plugin.ts")],
        ...["--listen", server, "--listen-tls-crt", f("kpng.crt"), "--listen-tls-key", f("kpng.key")],
        ...["--listen-tls-ca", f("operators-ca.crt")],
      ],
      { wrap: ["ip", "netns", "exec", netns], env: { KPNG_TEST_DRIFTS: f("drifts.json") } },
    );
    await proc.waitFor(/ INFO kpng: started /, 60_000);
  }, 90_000);

  afterAll(async () => {
    await proc?.stop("SIGKILL");
    await run(["ip", "netns", "del", netns]).catch(() => {});
    dir.remove();
  });

  test("verify with the CA and a client certificate: the backend read back, exit 0", async () => {
    const r = await kpng(["verify", "--server", server, ...tls()]);
    expect([r.code, r.err]).toEqual([0, ""]);
    expect(r.out.split("\n")[1]?.split(/\s+/).slice(0, 4)).toEqual(["drifty", "-", "-", "clean"]);
  });

  test("get with the same flags: the node's Service", async () => {
    const r = await kpng(["get", "services", "shop/web", "-o", "json", "--server", server, ...tls()]);
    expect([r.code, r.err]).toEqual([0, ""]);
    expect(JSON.parse(r.out).services.map((s: { name: string }) => s.name)).toEqual(["web"]);
  });

  test("plaintext to the TLS listener: closed, the TLS flags named, exit 1", async () => {
    const r = await kpng(["verify", "--server", server]);
    expect(r.code).toBe(1);
    expect(r.err).toContain(
      `${server} closed the connection (ECONNRESET): if kpng serves it with TLS (--listen-tls-crt), connect with --tls-ca`,
    );
  });

  test("a certificate the server's CA did not sign: refused, the reason shown, exit 1", async () => {
    const r = await kpng([
      "verify",
      "--server",
      server,
      "--tls-ca",
      f("kpng.crt"),
      "--tls-crt",
      f("stranger.crt"),
      "--tls-key",
      f("stranger.key"),
    ]);
    expect(r.code).toBe(1);
    expect(r.err).toContain(`${server} answered unauthenticated`);
  });

  test("a CA that did not sign the server's certificate: the handshake fails, exit 1", async () => {
    const r = await kpng(["get", "services", "--server", server, "--tls-ca", f("strangers-ca.crt")]);
    expect(r.code).toBe(1);
    expect(r.err).toContain(`${server}: TLS handshake failed (`);
    expect(r.err).toContain("--tls-ca must name the CA that signed its --listen-tls-crt");
  });

  test("bad input, one line naming the flag, exit 2", async () => {
    const cases: Array<[string[], string]> = [
      [["--tls-crt", f("operator.crt")], "flag --tls-key: required with --tls-crt"],
      [["--tls-ca", f("none.crt")], `flag --tls-ca: ${f("none.crt")}: cannot read: ENOENT`],
      [["--tls-ca", f("drifts.json")], `flag --tls-ca: ${f("drifts.json")}: not a PEM certificate bundle`],
    ];
    for (const [flags, message] of cases) {
      const r = await kpng(["verify", "--server", server, ...flags]);
      expect([flags.join(" "), r.code, r.err.trim().split("\n").length]).toEqual([flags.join(" "), 2, 1]);
      expect(r.err).toContain(message);
    }
    // off loopback only with TLS: the answer is the node's Services and endpoints
    const r = await kpng(["verify", "--server", "tcp://198.18.200.1:12090"]);
    expect(r.code).toBe(2);
    expect(r.err).toContain('flag --server: "tcp://198.18.200.1:12090" is not a loopback address: connect with TLS');
  });
});
