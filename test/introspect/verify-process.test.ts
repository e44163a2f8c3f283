// `kpng verify` against the running kpng (issue 36): the whole process with
// --input, a --plugin backend whose read-back reports what a test file
// lists (drift-plugin.ts), and its API on a unix socket, in a network
// namespace of its own. Exit 0 only when every backend read back clean;
// each drift printed by backend, Service and frontend; a backend that cannot
// read back is never reported clean.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { bufCurl } from "../harness/buf-curl.ts";
import { kpngCommand, ROOT, startKpng, tempDir, type KpngProcess } from "../harness/kpng-process.ts";
import { run } from "../harness/netns.ts";

async function kpng(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const p = Bun.spawn([...kpngCommand(), ...args], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, out, err };
}

const DRIFT = {
  service: "shop/web",
  frontend: "198.18.0.10:80/TCP",
  kind: "missing",
  detail: "element 198.18.0.10 . tcp . 80 in map service-ips",
};

describe("kpng verify through the running kpng's socket", () => {
  const dir = tempDir("kpng-verify-");
  const netns = `kpver${Math.random().toString(36).slice(2, 7)}`;
  const procs: KpngProcess[] = [];
  let sock = "";
  let both = "";
  let brain = "";
  let drifts = "";

  beforeAll(async () => {
    dir.create();
    sock = `unix://${join(dir.path, "kpng.sock")}`;
    both = `unix://${join(dir.path, "both.sock")}`;
    brain = `unix://${join(dir.path, "brain.sock")}`;
    drifts = join(dir.path, "drifts.json");
    writeFileSync(drifts, "[]");
    await run(["ip", "netns", "add", netns]);
    await run(["ip", "-n", netns, "link", "set", "lo", "up"]);
    const wrap = ["ip", "netns", "exec", netns];
    const source = ["--input", "examples/cluster.yaml", "--node-name", "node-1"];
    const plugin = join(import.meta.dir, "drift-plugin.ts");
    const env = { KPNG_TEST_DRIFTS: drifts };
    procs.push(startKpng([...source, "--plugin", plugin, "--listen", sock], { wrap, env }));
    // with a backend that has no read-back: healthz and metrics on ports of their own (same namespace)
    procs.push(
      startKpng(
        [
          ...source,
          "--plugin",
          plugin,
          "--plugin",
          "./examples/plugins/jsonl-backend.ts",
          "--listen",
          both,
          "--healthz-bind-address=127.0.0.1:20256",
          "--metrics-bind-address=127.0.0.1:20249",
        ],
        { wrap, env: { ...env, KPNG_JSONL_FILE: join(dir.path, "jsonl") } },
      ),
    );
    procs.push(startKpng(["serve", "--input", "examples/cluster.yaml", "--listen", brain], { wrap }));
    for (const p of procs.slice(0, 2)) await p.waitFor(/ INFO kpng: started /, 60_000);
    await procs[2].waitFor(/serving the API/, 60_000);
  }, 90_000);

  afterAll(async () => {
    for (const p of procs) await p.stop("SIGKILL");
    await run(["ip", "netns", "del", netns]).catch(() => {});
    dir.remove();
  });

  test("the kernel as programmed: exit 0, the backend named clean", async () => {
    const r = await kpng(["verify", "--server", sock]);
    expect(r.err).toBe("");
    expect(r.code).toBe(0);
    expect(r.out.split("\n")[1]?.split(/\s+/).slice(0, 4)).toEqual(["drifty", "-", "-", "clean"]);
  });

  test("a drift: printed by backend, Service and frontend, exit 1", async () => {
    writeFileSync(drifts, JSON.stringify([DRIFT]));
    const r = await kpng(["verify", "--server", sock]);
    expect(r.code).toBe(1);
    const [head, row] = r.out.split("\n");
    expect(head.split(/\s+/)).toEqual(["BACKEND", "SERVICE", "FRONTEND", "DRIFT", "DETAIL"]);
    expect(row.split(/\s+/).slice(0, 4)).toEqual(["drifty", "shop/web", "198.18.0.10:80/TCP", "missing"]);
    expect(row).toContain(DRIFT.detail);
    expect(r.err).toContain("the kernel differs from what kpng programmed: 1 difference");
  });

  test("NAMESPACE/NAME narrows the read-back: another Service is clean", async () => {
    expect((await kpng(["verify", "shop/web", "--server", sock])).code).toBe(1);
    const r = await kpng(["verify", "kube-system/dns", "--server", sock]);
    expect(r.code).toBe(0);
    expect(r.out).not.toContain("shop/web");
  });

  test("-o json gives every backend's drifts", async () => {
    const r = await kpng(["verify", "-o", "json", "--server", sock]);
    expect(r.code).toBe(1);
    expect(JSON.parse(r.out)).toEqual({ backends: [{ name: "drifty", supported: true, drifts: [DRIFT], error: "" }] });
  });

  test("a backend without read-back is reported as such, never clean: exit 1", async () => {
    writeFileSync(drifts, "[]");
    const r = await kpng(["verify", "--server", both]);
    expect(r.code).toBe(1);
    const rows = r.out
      .trimEnd()
      .split("\n")
      .slice(1)
      .map((l) => l.split(/\s+/).slice(0, 4));
    expect(rows).toEqual([
      ["drifty", "-", "-", "clean"],
      ["jsonl", "-", "-", "not-supported"],
    ]);
    expect(r.err).toContain("jsonl cannot read the kernel back");
  });

  test("kpng serve runs no backend: verify says whom to ask, exit 1", async () => {
    const r = await kpng(["verify", "--server", brain]);
    expect(r.code).toBe(1);
    expect(r.err).toContain("no backend runs in this kpng");
  });

  test("kpng get on kpng serve: a node's view, no backend revisions", async () => {
    const r = await kpng(["get", "services", "shop/web", "-o", "json", "--node-name", "node-2", "--server", brain]);
    expect(r.code).toBe(0);
    const reply = JSON.parse(r.out);
    expect([reply.nodeName, reply.backends, reply.services.map((s: { name: string }) => s.name)]).toEqual(["node-2", [], ["web"]]);
  });

  test("interop: buf curl calls GetServices over gRPC on the socket (the API, not only kpng's client)", async () => {
    const { code, err, messages } = await bufCurl(
      "http://localhost/introspectv1.Introspect/GetServices",
      '{"namespace":"shop","name":"web"}',
      ["--unix-socket", sock.slice("unix://".length)],
    );
    expect([code, err]).toEqual([0, ""]);
    // a server stream: the node's fields first, then the services (buf curl prints one JSON object per message)
    const [head, ...rest] = messages;
    const reply = { ...head, services: rest.flatMap((m: { services: unknown[] }) => m.services) };
    expect([reply.nodeName, reply.services.map((s: { namespace: string; name: string }) => `${s.namespace}/${s.name}`)]).toEqual([
      "node-1",
      ["shop/web"],
    ]);
    expect(reply.backends[0].name).toBe("drifty");
  });

  // other kpngs of the suite may serve the host's /run/kpng.sock: this one looks in a /run of its own (a private mount namespace)
  test("no --server and no socket at the defaults: the error names both and the flag that serves one", async () => {
    const p = Bun.spawn(
      ["unshare", "-m", "sh", "-c", 'mount -t tmpfs kpng-run /run && exec "$@"', "sh", ...kpngCommand(), "get", "services"],
      {
        cwd: ROOT,
        stdout: "pipe",
        stderr: "pipe",
      },
    );
    const [err, code] = await Promise.all([new Response(p.stderr).text(), p.exited]);
    expect(code).toBe(1);
    expect(err).toContain("unix:///run/kpng.sock or unix:///run/kpng/kpng.sock: start kpng with --listen=unix:///run/kpng.sock");
  });

  test("bad arguments: one line, exit 2", async () => {
    for (const args of [["verify", "web"], ["get"], ["get", "pods"], ["get", "services", "-o", "table"], ["verify", "a/b", "c/d"]]) {
      const r = await kpng([...args, "--server", sock]);
      expect([args.join(" "), r.code, r.err.trim().split("\n").length]).toEqual([args.join(" "), 2, 1]);
    }
  });
});
