// The single binary: `bun run build` writes dist/kpng; copied alone into an
// empty directory (no node_modules beside it) it runs every command, loads
// plugins from disk and passes the plugin and sidecar suite.

import { afterAll, beforeAll, expect, test } from "bun:test";
import { copyFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { ROOT, startKpng, startServe, tempDir } from "../harness/kpng-process.ts";
import { makeClientCert, makeTestCert } from "../harness/api-server.ts";
import { compiledKpng } from "../fixtures/compiled.ts";
import { pluginSuite } from "./suite.ts";

const dir = tempDir("kpng-bin-");
const bin = join(dir.path, "kpng");

beforeAll(async () => {
  dir.create();
  copyFileSync(await compiledKpng(), bin);
}, 60_000);
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

test("dist/kpng serves and follows over mutual TLS (node:tls in the single binary)", async () => {
  makeTestCert(dir.path, { name: "brain" });
  makeClientCert(dir.path, makeTestCert(dir.path, { san: "DNS:kpng-agents", name: "agents-ca" }), "node-1", "agent");
  const f = (name: string) => join(dir.path, name);
  const brain = await startServe(
    [
      "--input",
      join(ROOT, "examples/cluster.yaml"),
      "--node-name",
      "node-1",
      "--listen",
      "tcp://127.0.0.1:0",
      "--listen-tls-crt",
      f("brain.crt"),
      "--listen-tls-key",
      f("brain.key"),
      "--listen-tls-ca",
      f("agents-ca.crt"),
    ],
    { bin },
  );
  try {
    const api = `tcp://127.0.0.1:${(brain.addresses[0] as { port: number }).port}`;
    const agent = startKpng(
      [
        "local",
        "--api",
        api,
        "--tls-ca",
        f("brain.crt"),
        "--tls-crt",
        f("agent.crt"),
        "--tls-key",
        f("agent.key"),
        "--node-name",
        "node-2",
      ],
      { bin },
    );
    const full = startKpng(["local", "--input", join(ROOT, "examples/cluster.yaml"), "--node-name", "node-2"], { bin });
    expect(await agent.proc.exited).toBe(0);
    expect(await full.proc.exited).toBe(0);
    await Bun.sleep(20); // let the pumps drain
    expect(agent.stdout.join("\n")).toBe(full.stdout.join("\n"));
  } finally {
    await brain.stop();
  }
}, 60_000);

pluginSuite("dist/kpng", () => bin);
