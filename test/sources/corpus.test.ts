// The corpus (test/fixtures/corpus/cases.ts): objects as API servers of
// several versions hold them, each with what kube-proxy 1.36 programs for it,
// read through the doors a user has: `kpng local --input FILE -o json` (the
// whole process, as a user runs it), and the API-server source (list, then
// watch) against the real kube-apiserver 1.36.2. Warnings are said once, not
// again at a relist or a re-read; refused objects are counted in /metrics.
//
// The real server takes only what 1.36 validation accepts, and stores it with
// 1.36's defaults: a case it refuses (leading zeros before 1.33's stricter IP
// rules, values no version accepts: `apiRejects`, ...) cannot go through it,
// and is read from the in-repo API server instead (FakeApiServer serves the
// objects as the case wrote them, as an older or skewed API server sends
// them); so are the relist and re-read tests, which need a compaction the
// test injects. A case the real server took but changed (defaulted) is held
// to its reading, its warnings only where the value that warns came back.

import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { localStateJSON } from "../../src/core/brain/output.ts";
import { ProxyMetrics } from "../../src/core/node/metrics.ts";
import { corpus, corpusNode, NODE } from "../fixtures/corpus/cases.ts";
import { FakeApiServer } from "../harness/api-server.ts";
import { haveK8s, type KubeApiServer, sharedApiServer } from "../harness/kube-apiserver.ts";
import { rig, rigAt, tempDir, testCert, waitFor, type Rig } from "./kube/helpers.ts";
import { LOADED_WAIT_MS } from "../harness/kpng-process.ts";

// waits are bounded by their condition, up to LOADED_WAIT_MS each (issue 38: no test may depend
// on an idle machine): a test's own timeout leaves room for two
setDefaultTimeout(150_000);

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

type Obj = Record<string, unknown>;
const REST: Record<string, string> = { Service: "api/v1", EndpointSlice: "apis/discovery.k8s.io/v1" };
const plural = (kind: string) => (kind === "Service" ? "services" : "endpointslices");

/**
 * Creates a case's objects on the real server as they are written (server-set
 * metadata aside; a Service's status through its subresource): "refused" with
 * the server's word when it takes any of them not, else "kept" or "changed"
 * (the stored spec, endpoints or status differ from the case's).
 */
async function create(kube: KubeApiServer, objects: Obj[]): Promise<{ outcome: "kept" | "changed" } | { outcome: "refused"; why: string }> {
  let changed = false;
  for (const o of objects) {
    const { uid: _u, resourceVersion: _r, creationTimestamp: _c, ...metadata } = o.metadata as Obj;
    const ns = metadata.namespace as string;
    const ok = await kube.request("POST", "/api/v1/namespaces", { apiVersion: "v1", kind: "Namespace", metadata: { name: ns } });
    if (ok.status !== 201 && ok.status !== 409) throw new Error(`namespace ${ns}: ${ok.status}`);
    const { status, ...rest } = o;
    const base = `/${REST[o.kind as string]}/namespaces/${ns}/${plural(o.kind as string)}`;
    const res = await kube.request("POST", base, { ...rest, metadata });
    if (res.status !== 201) return { outcome: "refused", why: `${res.status} ${((await res.json()) as { message?: string }).message}` };
    let stored = (await res.json()) as Obj;
    if (o.kind === "Service" && status && JSON.stringify(status) !== JSON.stringify({ loadBalancer: {} })) {
      const st = await kube.request("PATCH", `${base}/${metadata.name}/status`, { status });
      if (st.status !== 200)
        return { outcome: "refused", why: `status: ${st.status} ${((await st.json()) as { message?: string }).message}` };
      stored = (await st.json()) as Obj;
    }
    for (const k of ["spec", "endpoints", "ports", "addressType", "status"])
      if (o[k] !== undefined && !sameJSON(o[k], stored[k])) changed = true;
  }
  return { outcome: changed ? "changed" : "kept" };
}

/** equal as JSON, keys in any order */
function sameJSON(a: unknown, b: unknown): boolean {
  const sorted = (v: unknown): unknown =>
    Array.isArray(v)
      ? v.map(sorted)
      : v && typeof v === "object"
        ? Object.fromEntries(
            Object.keys(v)
              .sort()
              .map((k) => [k, sorted((v as Obj)[k])]),
          )
        : v;
  return JSON.stringify(sorted(a)) === JSON.stringify(sorted(b));
}

/**
 * The cases kube-apiserver 1.36.2 refuses, with what it says: values its
 * validation refuses, and two clashes no single cluster can hold (c01's
 * cluster IP is the default/kubernetes Service's; c06 and c12 want node port
 * 30080, which an earlier case holds).
 */
const REFUSED: Record<string, string> = {
  c01: "198.18.0.1: provided IP is already allocated",
  c03: "must not have leading 0s",
  c04: "must not have leading 0s",
  c06: "30080: provided port is already allocated",
  c07: "must be in canonical form",
  c08: 'Unsupported value: "Global"',
  c09: 'Unsupported value: "ClusterIPWithLB"',
  c10: 'Unsupported value: "PreferLocal"',
  c11: 'Unsupported value: "Cookie"',
  c12: "30080: provided port is already allocated",
  c13: 'Unsupported value: "QUIC"',
  c18: "must not have leading 0s",
  c21: 'Unsupported value: "Hostname"',
  c24: 'Unsupported value: "InternalOnly"',
};

const real = haveK8s("corpus through the real API server");
/** what the real server made of each case (filled before the suites run) */
const outcomes = new Map<string, Awaited<ReturnType<typeof create>>>();

describe.skipIf(!real)("corpus through the API-server source: the real kube-apiserver 1.36.2", () => {
  let r: Omit<Rig, "api">;
  let services: Map<string, ServiceJSON>;
  beforeAll(async () => {
    const kube = await sharedApiServer();
    await kube.apply(corpusNode as never);
    for (const c of corpus.filter((x) => !x.apiRejects)) outcomes.set(c.id, await create(kube, c.objects));
    r = await rigAt(kube.writeKubeconfig(join(tmp.dir, "kubeconfig")));
    await waitFor("revision 1", () => r.rev() >= 1, LOADED_WAIT_MS);
    const taken = corpus.filter((c) => outcomes.get(c.id) && outcomes.get(c.id)!.outcome !== "refused" && c.want !== "none");
    // the watch brings what the list did not have yet: every taken case read
    await waitFor(
      "every case read",
      () => taken.every((c) => byNamespace(localStateJSON(r.brain.view(NODE).state!).services).has(c.id)),
      LOADED_WAIT_MS,
    );
    services = byNamespace(localStateJSON(r.brain.view(NODE).state!).services);
  }, 150_000);
  afterAll(async () => {
    await r?.close();
    // the shared control plane's reset knows only the namespaces it made: the slices of the cases' own go here
    const kube = await sharedApiServer();
    for (const c of corpus) await kube.request("DELETE", `/apis/discovery.k8s.io/v1/namespaces/${c.id}/endpointslices`);
  });

  test("what 1.36 refuses, each for its reason (read from the in-repo API server below instead)", () => {
    const refused = [...outcomes].filter(([, o]) => o.outcome === "refused");
    expect(
      Object.fromEntries(
        refused.map(([id, o]) => [id, o.outcome === "refused" && REFUSED[id] && o.why.includes(REFUSED[id]) ? REFUSED[id] : o]),
      ),
    ).toEqual(REFUSED);
  });

  for (const c of corpus.filter((x) => !x.apiRejects)) {
    test(`${c.id} ${c.name}`, () => {
      const o = outcomes.get(c.id)!;
      // refused by 1.36: read from the in-repo API server (the next suite)
      if (o.outcome === "refused") return;
      const got = services.get(c.id);
      if (c.want === "none") expect(got).toBeUndefined();
      else expect(got).toMatchObject(c.want);
      // a value 1.36 defaulted or normalised away warns no more: said once if it came back, never twice
      for (const w of c.warns ?? []) {
        if (o.outcome === "kept") expect(warnLines(r.log.lines, w)).toHaveLength(1);
        else expect(warnLines(r.log.lines, w).length).toBeLessThanOrEqual(1);
      }
    });
  }
});

describe("corpus through the API-server source: the in-repo API server, for what the real one refuses", () => {
  let api: FakeApiServer;
  let r: Rig;
  let services: Map<string, ServiceJSON>;
  /** the cases the real server refused (all, where there is no real server), and those no server accepts */
  const cases = () => corpus.filter((c) => c.apiRejects || !real || outcomes.get(c.id)?.outcome === "refused");
  beforeAll(async () => {
    api = await FakeApiServer.start(testCert(tmp.dir));
    api.apply(corpusNode);
    for (const c of corpus) for (const o of c.objects) api.apply(o);
    r = await rig(api, tmp.dir);
    await waitFor("revision 1", () => r.rev() >= 1, LOADED_WAIT_MS);
    services = byNamespace(localStateJSON(r.brain.view(NODE).state!).services);
  });
  afterAll(async () => {
    await r?.close();
    await api?.close();
  });

  for (const c of corpus) {
    test(`${c.id} ${c.name}`, () => {
      // taken by the real server: read from it (the suite above)
      if (!cases().includes(c)) return;
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
      LOADED_WAIT_MS,
    );
    await api.down();
    api.compact();
    await api.up();
    await waitFor("relisted", () => r.source.stats.relists >= 1, LOADED_WAIT_MS);
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
    await waitFor("said again", () => warnLines(r.log.lines, c.warns![0]).length === 2, LOADED_WAIT_MS);
  });
});
