// File-level bad input: a file that holds no Kubernetes object at all (the
// wrong file) is exit 2 with one line at start-up, and a logged error that
// keeps the last good state while running. A file with some good and some
// bad objects keeps working (bad ones skipped and logged).

import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Brain } from "../../src/core/brain/brain.ts";
import { isInvalidArgument } from "../../src/core/errors.ts";
import { memoryLogger } from "../../src/core/log.ts";
import { readClusterFile, startFileSource } from "../../src/core/sources/file.ts";

const root = join(import.meta.dir, "../..");
const dir = mkdtempSync(join(tmpdir(), "kpng-file-bad-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const web = {
  apiVersion: "v1",
  kind: "Service",
  metadata: { name: "web", namespace: "default" },
  spec: { clusterIP: "198.18.0.10", ports: [{ name: "http", port: 80 }] },
};
const node1 = { apiVersion: "v1", kind: "Node", metadata: { name: "node-1" } };
const good = JSON.stringify({ apiVersion: "v1", kind: "List", items: [web, node1] });

/** Files that hold no Kubernetes object, and what the one line must say about them. */
const wrongFiles: Array<{ name: string; bytes: string | Uint8Array; says: string }> = [
  { name: "an empty file", bytes: "", says: "no Kubernetes object in the file: it is empty" },
  { name: "only comments and a document marker", bytes: "# nothing here\n---\n", says: "no Kubernetes object in the file: it is empty" },
  { name: "one scalar", bytes: "hello world\n", says: 'no Kubernetes object in the file: it holds one string ("hello world")' },
  { name: "a number", bytes: "42\n", says: "no Kubernetes object in the file: it holds one number (42)" },
  { name: "a list of numbers", bytes: "[1, 2, 3]\n", says: "no Kubernetes object in the file: it holds a list of 3 numbers" },
  {
    name: "documents of mixed scalars",
    bytes: "1\n---\nfoo\n",
    says: "no Kubernetes object in the file: it holds a list of 2 items (number, string)",
  },
  {
    name: "a mapping without a kind",
    bytes: "services: []\n",
    says: "no Kubernetes object in the file: it holds one mapping without a kind",
  },
  {
    name: "a List whose items are numbers",
    bytes: "kind: List\nitems: [1, 2]\n",
    says: "no Kubernetes object in the file: it holds a list of 2 numbers",
  },
  {
    name: "bytes that are not UTF-8 text",
    bytes: new Uint8Array([0xff, 0xfe, 0xfa, ...new TextEncoder().encode(" kind: List\n")]),
    says: "the input file is not UTF-8 text (byte 0xff at offset 0)",
  },
  {
    name: "UTF-8 cut in the middle of a character",
    bytes: new Uint8Array([...new TextEncoder().encode("kind: Lis"), 0xc3]),
    says: "the input file is not UTF-8 text (byte 0xc3 at offset 9)",
  },
];

/** Files kpng reads without complaint, however little they hold. */
const acceptedFiles: Array<{ name: string; bytes: string; services: number }> = [
  { name: "an empty kubectl List (an empty cluster)", bytes: "apiVersion: v1\nkind: List\nitems: []\n", services: 0 },
  { name: "only kinds kpng does not read", bytes: "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: x }\n", services: 0 },
  {
    name: "good and bad objects: the bad one skipped (at start-up kpng refuses it, see below)",
    bytes: JSON.stringify({
      kind: "List",
      items: [web, { ...web, metadata: { name: "bad", namespace: "default" }, spec: { ports: [{ port: 70000 }] } }, 7],
    }),
    services: 1,
  },
];

const fileWith = (name: string, bytes: string | Uint8Array) => {
  const path = join(dir, `${name.replace(/\W+/g, "-")}.yaml`);
  writeFileSync(path, bytes);
  return path;
};

describe("reading a file that holds no Kubernetes object", () => {
  for (const c of wrongFiles) {
    test(`${c.name}: invalid_argument naming the file and what it holds`, async () => {
      const path = fileWith(c.name, c.bytes);
      const err = await readClusterFile(path).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(isInvalidArgument(err)).toBe(true);
      expect((err as Error).message).toBe(`[invalid_argument] ${path}: ${c.says}`);
    });
  }
  for (const c of acceptedFiles) {
    test(`${c.name}: read`, async () => {
      const parsed = await readClusterFile(fileWith(c.name, c.bytes));
      expect(parsed.objects.filter((o) => o.kind === "Service")).toHaveLength(c.services);
    });
  }
});

describe("at start-up: exit 2 and one line", () => {
  const run = (path: string) => {
    const r = Bun.spawnSync(
      [process.execPath, join(root, "src/main.ts"), "--input", path, "--node-name", "node-1", "--backend", "nft", "--dry-run", "--once"],
      { cwd: root },
    );
    return { code: r.exitCode, err: r.stderr.toString(), out: r.stdout.toString() };
  };
  for (const c of wrongFiles.filter((_, i) => i % 3 === 0 || i === wrongFiles.length - 2)) {
    test(`${c.name}: exit 2`, () => {
      const path = fileWith(`cli-${c.name}`, c.bytes);
      const r = run(path);
      expect(r.code).toBe(2);
      expect(r.err).toBe(`kpng: [invalid_argument] ${path}: ${c.says}\n`);
      expect(r.out).toBe("");
    });
  }
  // What no API server would hold, an object or one value of one, is bad input: the first named.
  const refused: Array<{ name: string; items: unknown[]; says: (path: string) => string }> = [
    {
      name: "an object no API server holds (port out of range)",
      items: [web, { ...web, metadata: { name: "bad", namespace: "default" }, spec: { ports: [{ port: 70000 }] } }, 7],
      says: (p) => `${p}: item 1: service default/bad spec.ports[0].port: 70000 is out of range (and 1 more)`,
    },
    {
      name: "one value no API server holds (a source range)",
      items: [{ ...web, spec: { ...web.spec, loadBalancerSourceRanges: ["10.0.0.0/8", "10.0.0.0/33"] } }],
      says: (p) => `${p}: service default/web spec.loadBalancerSourceRanges[1]: "10.0.0.0/33" is not a CIDR: skipped`,
    },
  ];
  for (const c of refused) {
    test(`${c.name}: exit 2, one line naming file, object and field`, () => {
      const path = fileWith(`cli-${c.name}`, JSON.stringify({ kind: "List", items: c.items }));
      const r = run(path);
      expect([r.code, r.err, r.out]).toEqual([2, `kpng: [invalid_argument] ${c.says(path)}\n`, ""]);
    });
  }
  test("what an API server holds, however old or new: exit 0, unknown values named in a WARN line", () => {
    const svc = {
      ...web,
      spec: { ...web.spec, clusterIP: "198.018.000.010", internalTrafficPolicy: "Topology", loadBalancerSourceRanges: [" 10.0.0.0/8 "] },
    };
    const r = run(fileWith("cli-accepted", JSON.stringify({ kind: "List", items: [svc, node1] })));
    expect(r.code).toBe(0);
    expect(r.err).toMatch(
      /WARN kpng\/file: read as kube-proxy reads it warning=".*service default\/web spec\.internalTrafficPolicy: unknown value \\"Topology\\": Cluster/,
    );
    expect(r.out).toContain("198.18.0.10"); // leading zeros read as decimal
  });
});

describe("while running: an edit that leaves such a file keeps the last good state, and says why", () => {
  for (const c of wrongFiles) {
    test(c.name, async () => {
      const path = fileWith(`run-${c.name}`, good);
      const brain = new Brain();
      const log = memoryLogger();
      const src = await startFileSource({ path, brain, log, watch: false });
      try {
        const view = brain.view("node-1");
        expect([view.state!.rev, view.state!.services.size]).toEqual([1, 1]);
        writeFileSync(path, c.bytes);
        await src.reload();
        expect([view.state!.rev, view.state!.services.size]).toEqual([1, 1]);
        // the logger quotes values as JSON strings
        expect(log.lines.at(-1)).toEndWith(
          `ERROR test: input file not loaded, keeping the last good state error=${JSON.stringify(`[invalid_argument] ${path}: ${c.says}`)}`,
        );
        // and the next good edit is taken
        writeFileSync(path, JSON.stringify({ kind: "List", items: [node1] }));
        await src.reload();
        expect([view.state!.rev, view.state!.services.size]).toEqual([2, 0]);
      } finally {
        src.close();
      }
    });
  }
});
