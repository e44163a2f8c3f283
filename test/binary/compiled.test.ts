// The single binary: `bun run build` writes dist/kpng; copied alone into an
// empty directory (no node_modules beside it) it runs every command, loads
// plugins from disk and passes the plugin and sidecar suite.

import { afterAll, beforeAll, expect, test } from "bun:test";
import { copyFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { ROOT, startKpng, tempDir } from "../api/kpng-process.ts";
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

pluginSuite("dist/kpng", () => bin);
