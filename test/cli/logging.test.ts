// Logs as Kubernetes components write them: -v (klog verbosity) and
// --logging-format=json with component-base's field names, checked by
// parsing every line the real process writes.

import { afterEach, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { configureLogging, createLogger, jsonLine } from "../../src/core/log.ts";
import { EXAMPLE_NODE_1 } from "../harness/kpng-process.ts";

const root = join(import.meta.dir, "../..");
const kpng = (...args: string[]) => {
  const r = Bun.spawnSync(
    [process.execPath, join(root, "src/main.ts"), ...EXAMPLE_NODE_1, "--backend", "nft", "--dry-run", "--once", ...args],
    { cwd: root, env: { ...process.env, KPNG_LOG_LEVEL: "" } },
  );
  return { code: r.exitCode, out: r.stdout.toString(), lines: r.stderr.toString().trim().split("\n").filter(Boolean) };
};

describe("the logger", () => {
  const capture = (opts: { format?: "text" | "json"; verbosity?: number }) => {
    const lines: string[] = [];
    return { lines, log: createLogger("kpng", { write: (l) => lines.push(l), ...opts }) };
  };
  const cases: Array<{ name: string; verbosity: number; want: string[] }> = [
    { name: "-v 0: info and warnings, no V(2), no debug", verbosity: 0, want: ["info", "warn"] },
    { name: "-v 2: V(2) lines too", verbosity: 2, want: ["info", "v2", "warn"] },
    { name: "-v 4: debug lines too (V(4))", verbosity: 4, want: ["info", "v2", "debug", "warn"] },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const { lines, log } = capture({ verbosity: c.verbosity });
      log.info("info");
      log.v(2).info("v2");
      log.debug("debug");
      log.warn("warn");
      expect(lines.map((l) => l.split(": ")[1])).toEqual(c.want);
    });
  }

  test("JSON: ts (ms since the epoch), v, msg, then kpng's component and the key/values; err for an error", () => {
    const now = 1_767_323_045_678.5;
    expect(JSON.parse(jsonLine(now, "info", 2, "kpng/serve", "synced", { backend: "nft", services: 3 }))).toEqual({
      ts: now,
      v: 2,
      msg: "synced",
      component: "kpng/serve",
      backend: "nft",
      services: 3,
    });
    expect(JSON.parse(jsonLine(now, "error", 0, "kpng", "sync failed", { error: new Error("boom") }))).toEqual({
      ts: now,
      msg: "sync failed",
      component: "kpng",
      err: "boom",
    });
    expect(JSON.parse(jsonLine(now, "warn", 0, "kpng", "careful"))).toMatchObject({ v: 0, severity: "warning" });
  });

  afterEach(() => configureLogging({ format: "text" }));
  test("configureLogging reaches loggers made before it (main's module-level logger)", () => {
    const lines: string[] = [];
    const early = createLogger("kpng");
    const orig = process.stderr.write.bind(process.stderr);
    process.stderr.write = ((s: string) => (lines.push(s), true)) as typeof process.stderr.write;
    try {
      configureLogging({ format: "json" });
      early.info("hello");
    } finally {
      process.stderr.write = orig;
    }
    expect(JSON.parse(lines[0])).toMatchObject({ msg: "hello", v: 0 });
  });
});

describe("the real process", () => {
  test("--logging-format=json: every stderr line is one JSON object with ts, v, msg; stdout keeps the rules", () => {
    const r = kpng("--logging-format=json", "--v=2");
    expect(r.code).toBe(0);
    expect(r.out).toContain("table ip kpng");
    expect(r.lines.length).toBeGreaterThan(3);
    for (const line of r.lines) {
      const o = JSON.parse(line);
      expect(typeof o.ts).toBe("number");
      expect(Math.abs(o.ts - Date.now())).toBeLessThan(120_000);
      expect(typeof o.msg).toBe("string");
      expect(typeof o.v).toBe("number");
    }
    expect(r.lines.map((l) => JSON.parse(l))).toContainEqual(
      expect.objectContaining({ msg: "proxy mode", mode: "nftables", from: "flag", v: 0 }),
    );
  });

  test("JSON: a fatal start-up error is a JSON line too (err), exit code 2", () => {
    const r = Bun.spawnSync(
      [
        process.execPath,
        join(root, "src/main.ts"),
        "--logging-format=json",
        "--master",
        "api.example:6443",
        "--once",
        "--dry-run",
        "--healthz-bind-address=",
        "--metrics-bind-address=",
      ],
      { cwd: root },
    );
    expect(r.exitCode).toBe(2);
    const last = JSON.parse(r.stderr.toString().trim().split("\n").at(-1)!);
    expect(last).toMatchObject({
      msg: "command failed",
      err: expect.stringContaining('flag --master: "api.example:6443" is not an http(s) URL'),
    });
    expect(typeof last.ts).toBe("number");
  });

  test("-v 2 shows the V(2) lines the default hides", () => {
    const quiet = kpng();
    const loud = kpng("-v", "2");
    expect([quiet.code, loud.code]).toEqual([0, 0]);
    expect(quiet.lines.some((l) => l.includes("conntrack sysctls not set (dry run)"))).toBe(false);
    expect(loud.lines.some((l) => l.includes("INFO kpng: conntrack sysctls not set (dry run)"))).toBe(true);
  });
});
