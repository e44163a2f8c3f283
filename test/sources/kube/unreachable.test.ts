// The API server cannot be reached when kpng starts (the node boots before
// the control plane, or the pod is deleted during an outage): kpng keeps
// retrying the first list, and a SIGTERM still stops it at once, as the
// kubelet expects of any pod, instead of after the grace period's SIGKILL.
// The whole process, with the flags an operator passes.

import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { LOADED_WAIT_MS, startKpng } from "../../harness/kpng-process.ts";
import { loadedBound } from "../../harness/load.ts";
import { tempDir } from "./helpers.ts";

const tmp = tempDir("kpng-unreachable-");
afterAll(() => tmp.remove());

// Port 1 on loopback: nothing listens, every connect is refused.
const NO_SERVER = ["--master", "http://127.0.0.1:1"];
// each test waits up to LOADED_WAIT_MS for kpng's start-up or exit: 30 s + 60 s
setDefaultTimeout(90_000);
const QUIET = ["--healthz-bind-address", "", "--metrics-bind-address", ""];

const cases = [
  { name: "kpng (brain and backend)", args: [...NO_SERVER, ...QUIET, "--hostname-override", "node-1", "--backend", "nft", "--dry-run"] },
  { name: "kpng serve (brain only)", args: ["serve", ...NO_SERVER, "--listen", `unix://${join(tmp.dir, "kpng.sock")}`] },
];

describe("SIGTERM while the first list cannot reach the API server", () => {
  // two loaded waits: the failed list, the exit
  for (const c of cases)
    test(`${c.name}: exits 0 within 2 s`, async () => {
      const p = startKpng(c.args);
      await p.waitFor(/list failed, keeping the last known state/);
      const t0 = performance.now();
      const code = await Promise.race([p.stop("SIGTERM"), Bun.sleep(LOADED_WAIT_MS).then(() => "still running")]);
      if (code === "still running") p.proc.kill("SIGKILL");
      expect(code).toBe(0);
      // the promise: within 2 s of the signal on a machine with a core to spare
      expect(performance.now() - t0).toBeLessThan(loadedBound(2_000));
      expect(p.stderr.some((l) => / INFO kpng: shutting down signal=SIGTERM/.test(l))).toBe(true);
    }, 150_000);
});

describe("a backend that cannot work, while the first list cannot reach the API server", () => {
  test("kpng --backend nft without nft: exits at once with the reason, not after the API server comes", async () => {
    const empty = join(tmp.dir, "bin");
    mkdirSync(empty, { recursive: true });
    // no dry run: setup asks the kernel, through nft, to check kpng's skeleton; there is no nft to run
    const p = startKpng([...NO_SERVER, ...QUIET, "--hostname-override", "node-1", "--backend", "nft"], { env: { PATH: empty } });
    // bounded by the exit (a kpng waiting for the API server would never exit), not by a start-up time
    const code = await Promise.race([p.proc.exited, Bun.sleep(LOADED_WAIT_MS).then(() => "still running")]);
    if (code === "still running") p.proc.kill("SIGKILL");
    expect(code).toBe(1);
    await Bun.sleep(50); // the pumps drain
    expect(p.stderr.join("\n")).toMatch(/nftables cannot load kpng's rules: .*nft/);
  });
});

describe("the health and metrics servers, while the first list cannot reach the API server", () => {
  test("a healthz port taken with --bind-address-hard-fail: exits 1 with the reason once the servers start (within their deadline)", async () => {
    const squatter = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("") });
    try {
      // a plugin that programs nothing (examples/plugins/jsonl-backend.ts), not a dry run: a dry run never fails on a port
      const p = startKpng([
        ...NO_SERVER,
        "--hostname-override",
        "node-1",
        "--plugin",
        join(import.meta.dir, "../../../examples/plugins/jsonl-backend.ts"),
        "--healthz-bind-address",
        `127.0.0.1:${squatter.port}`,
        "--metrics-bind-address",
        "",
        "--bind-address-hard-fail",
      ]);
      const code = await Promise.race([p.proc.exited, Bun.sleep(LOADED_WAIT_MS).then(() => "still running")]);
      if (code === "still running") p.proc.kill("SIGKILL");
      expect(code).toBe(1);
      await Bun.sleep(50); // the pumps drain
      expect(p.stderr.join("\n")).toContain(`kpng: [unavailable] healthz: cannot listen on 127.0.0.1:${squatter.port}: EADDRINUSE`);
    } finally {
      squatter.stop(true);
    }
  });
});
