// Plugins and sidecars, end to end: the same suite runs kpng from source and
// as the compiled dist/kpng (test/binary/*.test.ts). The example plugin
// (examples/plugins/jsonl-backend.ts) prints every call it receives as one
// JSON line, so its output shows exactly what a backend was given.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Brain } from "../../src/core/brain/brain.ts";
import { memoryLogger } from "../../src/core/log.ts";
import { startFileSource } from "../../src/core/sources/file.ts";
import type { NodeState } from "../../src/core/brain/state.ts";
import { ROOT, startKpng, startServe, tempDir, type KpngProcess } from "../harness/kpng-process.ts";

type Line = { op: string; key?: string; n?: number };
const parse = (lines: string[]): Line[] => lines.filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as Line);
const opKeys = (lines: Line[]) => lines.filter((l) => l.op !== "sync").map((l) => `${l.op} ${l.key}`);
/** lines strictly between sync n-1 and sync n */
const changeSet = (lines: Line[], n: number) => {
  const syncs = lines.flatMap((l, i) => (l.op === "sync" ? [i] : []));
  return opKeys(lines.slice(n === 1 ? 0 : syncs[n - 2] + 1, syncs[n - 1]));
};

async function expectedState(input: string, node: string): Promise<NodeState> {
  const brain = new Brain();
  (await startFileSource({ path: input, brain, log: memoryLogger(), watch: false })).close();
  return brain.view(node).state!;
}
const fullOps = (s: NodeState) => [
  ...[...s.services.keys()].map((k) => `setService ${k}`),
  ...[...s.services].flatMap(([k, se]) => [...se.endpoints.keys()].map((e) => `setEndpoint ${k}/${e}`)),
];

/** Runs the suite; `bin()` gives the compiled binary's path, or undefined to run from source. */
export function pluginSuite(label: string, bin: () => string | undefined) {
  describe(label, () => {
    const dir = tempDir("kpng-plugin-");
    const input = join(dir.path, "cluster.yaml");
    const plugin = join(dir.path, "jsonl-backend.ts");
    let n = 0;
    const sock = () => join(dir.path, `api-${++n}.sock`);
    const procs: KpngProcess[] = [];
    const kpng = (args: string[], env?: Record<string, string>) => {
      const p = startKpng(args, { bin: bin(), env });
      procs.push(p);
      return p;
    };
    const serve = async (s: string) => {
      const p = await startServe(["--input", input, "--listen", `unix://${s}`], { bin: bin() });
      procs.push(p);
      return p;
    };

    beforeAll(() => {
      dir.create();
      copyFileSync(join(ROOT, "examples/cluster.yaml"), input);
      // A copy outside the repository: a plugin is a file on disk, nothing more.
      copyFileSync(join(ROOT, "examples/plugins/jsonl-backend.ts"), plugin);
    });
    afterAll(async () => {
      await Promise.all(procs.map((p) => p.stop("SIGKILL")));
      dir.remove();
    });

    test("--plugin in process, --once: one sync carrying every service and endpoint of the node", async () => {
      const p = kpng(["--input", input, "--node-name", "node-2", "--plugin", plugin, "--once"]);
      expect(await p.proc.exited).toBe(0);
      const lines = parse(p.stdout);
      expect(lines.filter((l) => l.op === "sync")).toHaveLength(1);
      expect(opKeys(lines).sort()).toEqual(fullOps(await expectedState(input, "node-2")).sort());
    });

    test("the same plugin as a sidecar (`kpng backend --api`): the same calls", async () => {
      const s = sock();
      await serve(s);
      const p = kpng(["backend", "--api", `unix://${s}`, "--node-name", "node-2", "--plugin", plugin, "--once"]);
      expect(await p.proc.exited).toBe(0);
      expect(opKeys(parse(p.stdout)).sort()).toEqual(fullOps(await expectedState(input, "node-2")).sort());
    }, 150_000);

    test("a built-in and a plugin at once in a sidecar: both fed", async () => {
      const s = sock();
      await serve(s);
      const p = kpng([
        "backend",
        "--api",
        `unix://${s}`,
        "--node-name",
        "node-1",
        "--backend",
        "nft",
        "--dry-run",
        "--plugin",
        plugin,
        "--once",
      ]);
      expect(await p.proc.exited).toBe(0);
      expect(parse(p.stdout).filter((l) => l.op === "sync")).toHaveLength(1);
      expect(p.stdout.join("\n")).toMatch(/table ip6? kpng/);
    }, 150_000);

    test("a sidecar started before the brain reconnects until it is up; an edit then arrives as one sync", async () => {
      const s = sock();
      const p = kpng(["backend", "--api", `unix://${s}`, "--node-name", "node-1", "--plugin", plugin]);
      await p.waitFor(/API stream failed, reconnecting/);
      await serve(s);
      await p.waitForCount(/"op":"sync"/, 1);
      const text = readFileSync(input, "utf8");
      writeFileSync(input, text.replace("port: 8080\n          targetPort: 8080", "port: 8081\n          targetPort: 8080"));
      try {
        await p.waitForCount(/"op":"sync"/, 2);
      } finally {
        writeFileSync(input, text);
      }
      expect(changeSet(parse(p.stdout), 2)).toEqual(["setService shop/api"]);
      expect(await p.stop("SIGTERM")).toBe(0);
    }, 270_000);

    test("a brain restart mid-watch: the backend gets only what changed meanwhile, nothing lost or repeated", async () => {
      const s = sock();
      const brain = await serve(s);
      const p = kpng(["backend", "--api", `unix://${s}`, "--node-name", "node-1", "--plugin", plugin]);
      await p.waitForCount(/"op":"sync"/, 1);
      await brain.stop("SIGTERM");
      const text = readFileSync(input, "utf8");
      // While the brain is down: shop/web-2 turns unready, and the dns service disappears.
      const edited = text
        .replace(/(- addresses:\n\s+- 198\.19\.2\.10\n\s+conditions:\n\s+ready:) true/, "$1 false")
        .replace(/\n {2}- apiVersion: v1\n {4}kind: Service\n {4}metadata:\n {6}name: dns\n[\s\S]*?(?=\n {2}- apiVersion)/, "");
      expect(edited).not.toBe(text);
      writeFileSync(input, edited);
      try {
        await p.waitFor(/API stream failed, reconnecting/);
        await serve(s);
        await p.waitForCount(/"op":"sync"/, 2);
      } finally {
        writeFileSync(input, text);
      }
      const before = await expectedState(input, "node-1");
      writeFileSync(input, edited);
      const after = await expectedState(input, "node-1");
      writeFileSync(input, text);
      const dns = [...before.services.keys()].find((k) => k.endsWith("/dns"))!;
      expect(after.services.has(dns)).toBe(false);
      const want = [
        ...(before.services.get("shop/web")!.endpoints.has("web-2") && !after.services.get("shop/web")!.endpoints.has("web-2")
          ? ["deleteEndpoint shop/web/web-2"]
          : []),
        ...[...before.services.get(dns)!.endpoints.keys()].map((e) => `deleteEndpoint ${dns}/${e}`),
        `deleteService ${dns}`,
      ];
      const got = changeSet(parse(p.stdout), 2).sort();
      if (JSON.stringify(got) !== JSON.stringify(want.sort()))
        console.error(`sidecar stderr:\n${p.stderr.join("\n")}\nstdout ops:\n${opKeys(parse(p.stdout)).join("\n")}`);
      expect(got).toEqual(want.sort());
    }, 330_000);
  });

  test(`${label}: a plugin reads the generated schemas the toolkit exported before (ctx.toolkit.ServiceSchema)`, async () => {
    const dir = tempDir("kpng-schemaplugin-");
    dir.create();
    try {
      const path = join(dir.path, "schemas.ts");
      writeFileSync(
        path,
        'export default (ctx) => { ctx.out(["schemas", ctx.toolkit.ServiceSchema.typeName, ctx.toolkit.EndpointSchema.typeName].join(" ") + "\\n"); return { name: "s", kind: "full", apply: async () => {} }; };\n',
      );
      const p = startKpng(["--input", join(ROOT, "examples/cluster.yaml"), "--plugin", path, "--once"], { bin: bin() });
      expect(await p.proc.exited).toBe(0);
      expect(p.stdout).toContain("schemas localv1.Service localv1.Endpoint");
    } finally {
      dir.remove();
    }
  });

  describe(`${label}: a plugin that is not a Backend is refused with one clear line (exit 2)`, () => {
    const dir = tempDir("kpng-badplugin-");
    beforeAll(() => dir.create());
    afterAll(() => dir.remove());
    const cases: Array<{ name: string; file: string; source?: string; want: RegExp }> = [
      { name: "no default export", file: "a.ts", source: "export const backend = 1;\n", want: /has no default export/ },
      { name: "a default export that is a number", file: "b.ts", source: "export default 42;\n", want: /not a kpng Backend: got number/ },
      {
        name: "an object of an unknown kind",
        file: "c.ts",
        source: 'export default { name: "x", kind: "weird" };\n',
        want: /not a kpng Backend: kind must be "full" or "incremental"/,
      },
      {
        name: "a full backend without apply",
        file: "d.ts",
        source: 'export default () => ({ name: "x", kind: "full" });\n',
        want: /not a kpng Backend: apply is missing/,
      },
      {
        name: "a factory that throws",
        file: "e.ts",
        source: 'export default () => { throw new Error("no kernel here"); };\n',
        want: /its BackendFactory failed: no kernel here/,
      },
      { name: "a syntax error", file: "f.ts", source: "export default {{;\n", want: /cannot load/ },
      { name: "a missing file", file: "missing.ts", want: /no such file/ },
      { name: "not a script", file: "g.txt", source: "hello\n", want: /must be a \.ts\/\.mts\/\.js\/\.mjs file/ },
    ];
    for (const c of cases) {
      test(c.name, async () => {
        const path = join(dir.path, c.file);
        if (c.source !== undefined) writeFileSync(path, c.source);
        const p = startKpng(["--input", join(ROOT, "examples/cluster.yaml"), "--plugin", path, "--once"], { bin: bin() });
        expect(await p.proc.exited).toBe(2);
        const errors = p.stderr.filter((l) => l.startsWith("kpng:"));
        expect(errors).toHaveLength(1);
        expect(errors[0]).toContain(`plugin ${path}`);
        expect(errors[0]).toMatch(c.want);
      });
    }
  });
}
