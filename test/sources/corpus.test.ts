// The corpus (test/fixtures/corpus/cases.ts): objects as API servers of
// several versions hold them, each with what kube-proxy 1.36 programs for it,
// read through both doors a user has: `kpng local --input FILE -o json` (the
// whole process, as a user runs it) and the API-server source against the
// in-repo API server (list, then watch). Warnings are said once, not again at
// a relist or a re-read; refused objects are counted in /metrics.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { localStateJSON } from "../../src/core/brain/output.ts";
import { ProxyMetrics } from "../../src/core/node/metrics.ts";
import { corpus, corpusNode, NODE } from "../fixtures/corpus/cases.ts";
import { FakeApiServer } from "../harness/api-server.ts";
import { rig, tempDir, testCert, waitFor, type Rig } from "./kube/helpers.ts";

const root = join(import.meta.dir, "../..");
const tmp = tempDir("kpng-corpus-");
afterAll(() => tmp.remove());

type ServiceJSON = ReturnType<typeof localStateJSON>["services"][number];
const byNamespace = (services: ServiceJSON[]) => new Map(services.map((s) => [s.namespace, s]));
/** what kpng says about the objects it reads (not about connections) */
const isReadLine = (l: string) => l.includes(" WARN ") && (l.includes("read as kube-proxy reads it") || l.includes("skipping"));
const warnLines = (lines: string[], needle: string) => lines.filter((l) => isReadLine(l) && l.includes(needle));

describe("corpus through kpng local --input (the CLI, -o json)", () => {
  const accepted = corpus.filter((c) => !c.apiRejects);
  let services: Map<string, ServiceJSON>;
  let stderr: string[];
  beforeAll(() => {
    const path = join(tmp.dir, "corpus.json");
    writeFileSync(path, JSON.stringify({ apiVersion: "v1", kind: "List", items: [corpusNode, ...accepted.flatMap((c) => c.objects)] }));
    const r = Bun.spawnSync([process.execPath, join(root, "src/main.ts"), "local", "--input", path, "--node-name", NODE, "-o", "json"], {
      cwd: root,
    });
    stderr = r.stderr.toString().split("\n");
    if (r.exitCode !== 0) throw new Error(`kpng local exited ${r.exitCode}: ${r.stderr}`);
    services = byNamespace(JSON.parse(r.stdout.toString()).services);
  });

  for (const c of accepted) {
    test(`${c.id} ${c.name}`, () => {
      const got = services.get(c.id);
      if (c.want === "none") expect(got).toBeUndefined();
      else expect(got).toMatchObject(c.want);
      for (const w of c.warns ?? []) expect(warnLines(stderr, w)).toHaveLength(1);
    });
  }

  test("well-formed cases say nothing", () => {
    for (const c of accepted.filter((x) => !x.warns)) expect(warnLines(stderr, ` ${c.id}/`)).toEqual([]);
  });
});

describe("corpus through the API-server source", () => {
  let api: FakeApiServer;
  let r: Rig;
  let services: Map<string, ServiceJSON>;
  beforeAll(async () => {
    api = await FakeApiServer.start(testCert(tmp.dir));
    api.apply(corpusNode);
    for (const c of corpus) for (const o of c.objects) api.apply(o);
    r = await rig(api, tmp.dir);
    await waitFor("revision 1", () => r.rev() >= 1, 10_000);
    services = byNamespace(localStateJSON(r.brain.view(NODE).state!).services);
  });
  afterAll(async () => {
    await r?.close();
    await api?.close();
  });

  for (const c of corpus) {
    test(`${c.id} ${c.name}`, () => {
      const got = services.get(c.id);
      if (c.want === "none") expect(got).toBeUndefined();
      else expect(got).toMatchObject(c.want);
      for (const w of c.warns ?? []) expect(warnLines(r.log.lines, w)).toHaveLength(1);
    });
  }

  test("refused objects are counted by kind and reason in /metrics", async () => {
    const m = new ProxyMetrics({ brain: r.brain, backends: [], defaultMetrics: false });
    const text = await m.registry.metrics();
    const dropped = corpus.filter((c) => c.dropped);
    expect(dropped.length).toBeGreaterThan(0);
    expect(text).toContain(`kpng_objects_dropped_total{kind="Service",reason="invalid_cluster_ip"} ${dropped.length}`);
  });

  test("a watch event that brings an object back unchanged, and a relist, say nothing again", async () => {
    const before = r.log.lines.filter(isReadLine).length;
    const c = corpus.find((x) => x.id === "c30")!;
    api.apply(c.objects[0]); // MODIFIED, same content
    await waitFor(
      "watch event seen",
      () => r.source.stats.events.Service > corpus.filter((x) => x.objects.some((o) => o.kind === "Service")).length,
      5000,
    );
    await api.down();
    api.compact();
    await api.up();
    await waitFor("relisted", () => r.source.stats.relists >= 1, 10_000);
    await Bun.sleep(100);
    expect(r.log.lines.filter(isReadLine).length).toBe(before);
  });

  test("a value fixed and broken again is said again", async () => {
    const c = corpus.find((x) => x.id === "c31")!;
    const fixed = structuredClone(c.objects[0]) as { spec: { externalIPs: string[] } };
    fixed.spec.externalIPs = ["198.18.64.31"];
    api.apply(fixed as never);
    await waitFor(
      "fixed",
      () =>
        localStateJSON(r.brain.view(NODE).state!).services.find((s) => s.namespace === "c31")?.externalIPs.length === 1 &&
        r.source.stats.events.Service > 0,
    );
    api.apply(c.objects[0]);
    await waitFor("said again", () => warnLines(r.log.lines, c.warns![0]).length === 2, 5000);
  });
});
