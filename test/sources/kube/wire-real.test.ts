// The in-repo API server (test/harness/api-server.ts, FakeApiServer) held to
// the bytes of the real kube-apiserver 1.36.2 (test/harness/kube-apiserver.ts),
// so that the fake every fault-injection test speaks to cannot drift from what
// kpng meets in a cluster (issue 33: it once framed watch events as no API
// server does, and every test agreed with it).
//
// Objects are created with kubectl on the real server; the fake is given the
// very objects the real one holds (its JSON); then both are asked the same
// things the same way, in protobuf and in JSON: list pages (limit/continue),
// a streamed list (sendInitialEvents, ended by the k8s.io/initial-events-end
// BOOKMARK) going on as a watch through ADDED, MODIFIED and DELETED, a
// watch's BOOKMARK of each kind, and 410 Gone (a watch from a compacted
// resourceVersion: an ERROR event with a Status; a list with a stale
// continue token: an HTTP 410). Held equal: content types; in protobuf the
// envelope at every level (frame length, bare WatchEvent, RawExtension,
// "k8s\0" + runtime.Unknown with its typeMeta, List and ListMeta, Status);
// in JSON the keys at every level; and what kpng's decoders (ListDecoder,
// WatchDecoder, the JSON path) read from either. resourceVersions, continue
// tokens and a Status's message differ by nature: set or unset is compared,
// not the value (wire-bytes.ts).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { v4, v6 } from "../../fixtures/addresses.ts";
import { node, slice, svc } from "../../fixtures/k8s.ts";
import { FakeApiServer } from "../../harness/api-server.ts";
import { haveK8s, KubeApiServer, sharedApiServer } from "../../harness/kube-apiserver.ts";
import { decodeBody, ListDecoder, WatchDecoder } from "../../../src/core/sources/protobuf/envelope.ts";
import { LOADED_WAIT_MS } from "../../harness/kpng-process.ts";
import { waitFor } from "./helpers.ts";
import { bodyShape, framesShape, jsonEvents, keys, normalised, readJSONList, readJSONWatch, readList, readWatch } from "./wire-bytes.ts";

const PB = "application/vnd.kubernetes.protobuf";
const JSON_TYPE = "application/json";
const ENCODINGS = [PB, JSON_TYPE] as const;
const NS = "wire";
const NODE = "wire-node";
const WATCH_LIST = "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";

/** An answer in full: status, content type, bytes. */
interface Answer {
  status: number;
  type: string;
  bytes: Uint8Array;
}

/** A watch answer as it comes: its bytes so far, read until a condition holds. */
class Stream {
  private chunks: Uint8Array[] = [];
  ended = false;
  private readonly reader: { read(): Promise<{ done: boolean; value?: unknown }>; cancel(): Promise<void> };
  constructor(readonly res: Response) {
    this.reader = res.body!.getReader() as never;
    void this.pump();
  }
  private async pump() {
    for (;;) {
      const r = await this.reader.read().catch(() => ({ done: true, value: undefined }));
      if (r.done) return void (this.ended = true);
      this.chunks.push(r.value as Uint8Array);
    }
  }
  bytes(): Uint8Array {
    return Buffer.concat(this.chunks);
  }
  /** the event types so far, in order */
  types(): string[] {
    const b = this.bytes();
    if (this.res.headers.get("content-type")?.startsWith(PB)) return new WatchDecoder().push(b).map((e) => e.type);
    const text = new TextDecoder().decode(b);
    return jsonEvents(text.slice(0, text.lastIndexOf("\n") + 1)).map((e) => e.type);
  }
  until(what: string, f: (types: string[]) => boolean, ms = LOADED_WAIT_MS): Promise<true> {
    return waitFor(what, () => f(this.types()) || (this.ended && f(this.types())), ms);
  }
  close() {
    void this.reader.cancel().catch(() => {});
  }
}

/** How the test reaches a server: one request, or a stream. */
interface Door {
  name: string;
  fetch(path: string, accept: string): Promise<Response>;
}

const realDoor = (kube: KubeApiServer): Door => ({ name: "kube-apiserver", fetch: (path, accept) => kube.get(path, { accept }) });
const fakeDoor = (fake: FakeApiServer): Door => ({
  name: "FakeApiServer",
  fetch: (path, accept) => fetch(fake.url + path, { headers: { authorization: "Bearer test-token", accept } }),
});

async function answer(door: Door, path: string, accept: string): Promise<Answer> {
  const res = await door.fetch(path, accept);
  return { status: res.status, type: res.headers.get("content-type") ?? "", bytes: new Uint8Array(await res.arrayBuffer()) };
}

const text = (b: Uint8Array) => new TextDecoder().decode(b);

/** The comparable reading of a list answer: status, type, envelope, what kpng reads of it. */
function listView(kind: string, a: Answer) {
  const pb = a.type.startsWith(PB);
  return {
    status: a.status,
    type: a.type,
    envelope: pb ? bodyShape(a.bytes) : keys(JSON.parse(text(a.bytes))),
    read:
      a.status !== 200
        ? normalised(pb ? decodeBody(a.bytes).object : JSON.parse(text(a.bytes)))
        : pb
          ? readList(kind, a.bytes)
          : readJSONList(kind, text(a.bytes)),
  };
}

/** The comparable reading of a watch answer: type, frames, what kpng reads of each event. */
function watchView(a: { type: string; bytes: Uint8Array }) {
  const pb = a.type.startsWith(PB);
  return {
    type: a.type,
    envelope: pb ? framesShape(a.bytes) : jsonEvents(text(a.bytes)).map(keys),
    read: pb ? readWatch(a.bytes) : readJSONWatch(text(a.bytes)),
  };
}

/**
 * A streamed list's view without the BOOKMARKs after its first (the
 * initial-events-end one): the real server adds progress bookmarks at times
 * of its own choosing, between the events a test makes.
 */
function withoutLaterBookmarks(v: ReturnType<typeof watchView>) {
  const types = (v.read as Array<{ type: string }>).map((e) => e.type);
  const keep = types.map((t, i) => t !== "BOOKMARK" || i === types.indexOf("BOOKMARK"));
  if (v.envelope.length !== keep.length) throw new Error("watchView: envelope and reading disagree on the events");
  return { ...v, envelope: v.envelope.filter((_, i) => keep[i]), read: (v.read as unknown[]).filter((_, i) => keep[i]) };
}

/** The objects the tests create (kubectl, on the real server): ports named and not, both families, status, conditions, hints. */
const objects = [
  node(NODE, { ips: [v4.node(1)], zone: "zone-a" }),
  svc({ ns: NS, name: "a", clusterIPs: [v4.clusterIP(20)], ports: [{ name: "http", port: 80, targetPort: "web" }], affinity: 300 }),
  svc({
    ns: NS,
    name: "b",
    type: "NodePort",
    clusterIPs: [v4.clusterIP(21)],
    ports: [{ name: "tcp", port: 81, targetPort: 8081, nodePort: 30081 }],
    externalIPs: [v4.external(1)],
    iTP: "Local",
  }),
  svc({
    ns: NS,
    name: "c",
    type: "LoadBalancer",
    clusterIPs: [v6.clusterIP(22)],
    ports: [{ name: "udp", protocol: "UDP", port: 53, targetPort: 5353 }],
    eTP: "Local",
    lbIngress: [{ ip: v6.external(2), ipMode: "VIP" }],
    sourceRanges: ["2001:db8:9::/64"],
  }),
  slice({
    ns: NS,
    service: "a",
    ports: [{ name: "http", protocol: "TCP", port: 8080 }],
    endpoints: [
      { ip: v4.pod(1, 5), node: NODE, zone: "zone-a", forZones: ["zone-a"] },
      { ip: v4.pod(2, 6), node: "other", ready: false, serving: true, terminating: true, forZones: ["zone-a"] },
    ],
  }),
  slice({
    ns: NS,
    service: "c",
    family: "IPv6",
    ports: [{ name: "udp", protocol: "UDP", port: 5353 }],
    endpoints: [{ ip: v6.pod(1, 7), node: NODE }],
  }),
];

/** The fake given what the real server holds of each kind, as the real server wrote it. */
async function mirror(kube: KubeApiServer, fake: FakeApiServer): Promise<void> {
  for (const [path, kind] of [
    ["/api/v1/nodes", "Node"],
    ["/api/v1/services", "Service"],
    ["/apis/discovery.k8s.io/v1/endpointslices", "EndpointSlice"],
  ]) {
    const l = (await (await kube.get(path)).json()) as { items: Array<Record<string, unknown>> };
    for (const o of l.items) fake.apply({ ...o, kind });
  }
}

const real = haveK8s("the fake API server held to the real one's bytes");

describe.skipIf(!real)("the fake API server answers as kube-apiserver 1.36.2 does", () => {
  let kube: KubeApiServer;
  let fake: FakeApiServer;
  let doors: Door[];
  const streams: Stream[] = [];

  beforeAll(async () => {
    kube = await sharedApiServer();
    await kube.apply(...objects);
    fake = await FakeApiServer.start();
    await mirror(kube, fake);
    doors = [realDoor(kube), fakeDoor(fake)];
  }, 150_000);
  afterAll(async () => {
    for (const s of streams) s.close();
    await fake?.close();
  });

  const lists = [
    { kind: "Service", path: "/api/v1/services?limit=2", what: "a first page (limit 2: continue, remainingItemCount)" },
    {
      kind: "Service",
      path: "/api/v1/services?limit=2&labelSelector=!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name",
      what: "a first page with kube-proxy's label selector",
    },
    { kind: "EndpointSlice", path: "/apis/discovery.k8s.io/v1/endpointslices?limit=500", what: "the slices, one page" },
    { kind: "Node", path: `/api/v1/nodes?fieldSelector=metadata.name%3D${NODE}`, what: "this node by field selector" },
  ];

  for (const accept of ENCODINGS) {
    for (const l of lists) {
      test(`${accept}: list, ${l.what}`, async () => {
        const [r, f] = await Promise.all(doors.map((d) => answer(d, l.path, accept)));
        expect(r.status).toBe(200);
        // the real server's list items carry no kind (a reader takes it from the list)
        if (accept === JSON_TYPE) for (const i of JSON.parse(text(r.bytes)).items) expect(i.kind).toBeUndefined();
        expect(listView(l.kind, f)).toEqual(listView(l.kind, r));
      });
    }

    test(`${accept}: list, the next page by its continue token, to the end`, async () => {
      const pages = await Promise.all(
        doors.map(async (d) => {
          const out: Answer[] = [];
          let cont = "";
          do {
            const a = await answer(d, `/api/v1/services?limit=2${cont ? `&continue=${encodeURIComponent(cont)}` : ""}`, accept);
            out.push(a);
            const b = a.type.startsWith(PB) ? readList("Service", a.bytes) : readJSONList("Service", text(a.bytes));
            cont = (b as { continue: string }).continue === "<continue>" ? continueOf(a) : "";
          } while (cont && out.length < 5);
          return out;
        }),
      );
      expect(pages[0].length).toBe(2);
      expect(pages[1].map((p) => listView("Service", p))).toEqual(pages[0].map((p) => listView("Service", p)));
    });
  }

  test("both encodings read the same on each server (a list)", async () => {
    for (const d of doors) {
      const [p, j] = await Promise.all(ENCODINGS.map((e) => answer(d, "/api/v1/services", e)));
      expect(readList("Service", p.bytes)).toEqual(readJSONList("Service", text(j.bytes)));
    }
  });

  test("a streamed list (sendInitialEvents): ADDED each, the initial-events-end BOOKMARK; then ADDED, MODIFIED, DELETED as they happen", async () => {
    const open = async (d: Door, accept: string) => {
      const s = new Stream(await d.fetch(`/api/v1/services?${WATCH_LIST}`, accept));
      streams.push(s);
      await s.until(`${d.name} ${accept}: the initial-events-end bookmark`, (t) => t.includes("BOOKMARK"));
      return s;
    };
    const realStreams = await Promise.all(ENCODINGS.map((e) => open(doors[0], e)));
    const fakeStreams = await Promise.all(ENCODINGS.map((e) => open(doors[1], e)));
    // the changes on the real server, as an operator makes them
    await kube.apply(svc({ ns: NS, name: "d", clusterIPs: [v4.clusterIP(23)] }));
    await kube.kubectl(["annotate", "-n", NS, "service", "d", "note=changed"]);
    await kube.remove("Service", NS, "d");
    for (const s of realStreams) await s.until("the real DELETED", (t) => t.includes("DELETED"));
    // and the same on the fake: the very objects the real server sent
    for (const ev of jsonEvents(text(realStreams[1].bytes())).filter((e) => e.type !== "BOOKMARK" && e.object.metadata)) {
      const o = ev.object as { metadata: { name: string; namespace: string } };
      if (o.metadata.name !== "d") continue;
      if (ev.type === "DELETED") fake.remove("Service", NS, "d");
      else fake.apply(ev.object);
    }
    for (const s of fakeStreams) await s.until("the fake DELETED", (t) => t.includes("DELETED"));
    // up to the DELETED: the real server may send a BOOKMARK of its own after it, at a time of its choosing
    const upTo = (st: Stream) => {
      const type = st.res.headers.get("content-type")!;
      const b = st.bytes();
      const deleted = eventOf(type, b, "DELETED");
      return { type, bytes: b.subarray(0, deleted.byteOffset - b.byteOffset + deleted.length) };
    };
    for (const [i, accept] of ENCODINGS.entries()) {
      const [r, f] = [upTo(realStreams[i]), upTo(fakeStreams[i])];
      expect({ accept, ...withoutLaterBookmarks(watchView(f)) }).toEqual({ accept, ...withoutLaterBookmarks(watchView(r)) });
      expect((withoutLaterBookmarks(watchView(r)).read as Array<{ type: string }>).map((e) => e.type)).toEqual([
        "ADDED",
        "ADDED",
        "ADDED",
        "ADDED",
        "BOOKMARK",
        "ADDED",
        "MODIFIED",
        "DELETED",
      ]);
    }
    // the two encodings of one server read the same
    for (const [p, j] of [realStreams, fakeStreams]) expect(readWatch(upTo(p).bytes)).toEqual(readJSONWatch(text(upTo(j).bytes)));
    for (const s of [...realStreams, ...fakeStreams]) s.close();
  }, 150_000);

  // The real server sends a watch a BOOKMARK ahead of its deadline (timeoutSeconds), once its watch cache has moved past the
  // watch's resourceVersion: one change of the kind (a MODIFIED first), then the BOOKMARK, held equal alone.
  for (const c of [
    { path: "/api/v1/services", kind: "Service", object: ["service", "a", NS] },
    { path: "/apis/discovery.k8s.io/v1/endpointslices", kind: "EndpointSlice", object: ["endpointslice", "a-ipv4", NS] },
    { path: "/api/v1/nodes", kind: "Node", object: ["node", NODE] },
  ]) {
    test(`a watch's BOOKMARK (allowWatchBookmarks): ${c.kind}`, async () => {
      const [resource, name, ns] = c.object;
      const views: unknown[][] = [];
      for (const [i, d] of doors.entries()) {
        const rv = await listRV(d, c.path);
        const open = await Promise.all(
          ENCODINGS.map(
            async (e) =>
              new Stream(await d.fetch(`${c.path}?watch=true&allowWatchBookmarks=true&timeoutSeconds=4&resourceVersion=${rv}`, e)),
          ),
        );
        streams.push(...open);
        if (i === 0) await kube.kubectl(["annotate", resource, name, ...(ns ? ["-n", ns] : []), `bookmark=${Date.now()}`]);
        else {
          // the fake: the object as the real server now holds it, then a bookmark
          const got = await kube.get(`${c.path.replace(/\/(\w+)$/, ns ? `/namespaces/${ns}/$1` : "/$1")}/${name}`);
          await waitFor("the fake's watches open", () => fake.openWatches >= 2);
          fake.apply({ ...((await got.json()) as Record<string, unknown>), kind: c.kind });
          fake.bookmark();
        }
        for (const s of open) await s.until(`${d.name}: a BOOKMARK`, (t) => t.includes("BOOKMARK"));
        views.push(
          open.map((s) => {
            s.close();
            const type = s.res.headers.get("content-type")!;
            // up to the first BOOKMARK: how many more arrive before the stream is closed is the real server's timing
            const types = s.types();
            return {
              types: types.slice(0, types.indexOf("BOOKMARK") + 1),
              ...watchView({ type, bytes: eventOf(type, s.bytes(), "BOOKMARK") }),
            };
          }),
        );
      }
      expect(views[1]).toEqual(views[0]);
    }, 150_000);
  }
});

describe.skipIf(!real)("410 Gone, from kube-apiserver 1.36.2 (etcd compacted every second, no watch cache) and from the fake", () => {
  let kube: KubeApiServer;
  let fake: FakeApiServer;
  let doors: Door[];
  /** each server's continue token of a first page taken before the compaction */
  const stale = new Map<string, Record<string, string>>();

  beforeAll(async () => {
    // The watch cache would answer an old resourceVersion from its window; etcd answers 410 once compacted.
    kube = await KubeApiServer.start({ args: ["--watch-cache=false", "--etcd-compaction-interval=1s"] });
    await kube.apply(...objects.filter((o) => o.kind === "Service"));
    fake = await FakeApiServer.start();
    await mirror(kube, fake);
    doors = [realDoor(kube), fakeDoor(fake)];
    for (const d of doors)
      stale.set(
        d.name,
        Object.fromEntries(await Promise.all(ENCODINGS.map(async (e) => [e, continueOf(await answer(d, "/api/v1/services?limit=1", e))]))),
      );
    // changes after the first pages, then history compacted away
    await kube.kubectl(["annotate", "-n", NS, "service", "a", "note=1"]);
    fake.apply({ ...((await (await kube.get(`/api/v1/namespaces/${NS}/services/a`)).json()) as Record<string, unknown>), kind: "Service" });
    fake.compact();
    await waitFor(
      "kube-apiserver's etcd compacted past the first pages",
      async () =>
        (await answer(doors[0], `/api/v1/services?limit=1&continue=${stale.get(doors[0].name)![JSON_TYPE]}`, JSON_TYPE)).status === 410,
      LOADED_WAIT_MS,
    );
  }, 150_000);
  afterAll(async () => {
    await fake?.close();
    await kube?.close();
  });

  for (const accept of ENCODINGS) {
    test(`${accept}: a watch from resourceVersion 1: an ERROR event holding a Status Expired 410`, async () => {
      const views = [];
      for (const d of doors) {
        const s = new Stream(await d.fetch("/api/v1/services?watch=true&resourceVersion=1", accept));
        await s.until(`${d.name}: the ERROR`, (t) => t.includes("ERROR"));
        s.close();
        views.push(
          watchView({ type: s.res.headers.get("content-type")!, bytes: firstEvent(s.res.headers.get("content-type")!, s.bytes()) }),
        );
      }
      expect((views[0].read as Array<{ type: string; object: unknown }>)[0]).toMatchObject({
        type: "ERROR",
        object: { kind: "Status", reason: "Expired", code: 410 },
      });
      expect(views[1]).toEqual(views[0]);
    });

    test(`${accept}: a list with a continue token from before the compaction: HTTP 410, a Status Expired with a token to go on`, async () => {
      const views = [];
      for (const d of doors) {
        const a = await answer(d, `/api/v1/services?limit=1&continue=${stale.get(d.name)![accept]}`, accept);
        views.push({ ...listView("Service", a), status: a.status });
      }
      expect(views[0].status).toBe(410);
      expect(views[1]).toEqual(views[0]);
    });
  }
});

/** the continue token of a list answer (either encoding) */
function continueOf(a: Answer): string {
  if (!a.type.startsWith(PB)) return (JSON.parse(text(a.bytes)) as { metadata: { continue?: string } }).metadata.continue ?? "";
  const d = new ListDecoder("Service");
  d.push(a.bytes);
  return d.continue;
}

/** the resourceVersion a list of `path` is at now */
async function listRV(d: Door, path: string): Promise<string> {
  const a = await answer(d, `${path}?limit=1`, JSON_TYPE);
  return (JSON.parse(text(a.bytes)) as { metadata: { resourceVersion: string } }).metadata.resourceVersion;
}

/** the first event of a watch answer, alone: its frame, or its line */
function firstEvent(type: string, b: Uint8Array): Uint8Array {
  if (!type.startsWith(PB)) return b.subarray(0, b.indexOf(0x0a) + 1);
  return b.subarray(0, 4 + new DataView(b.buffer, b.byteOffset, 4).getUint32(0));
}

/** the first event of type `want` of a watch answer, alone */
function eventOf(type: string, b: Uint8Array, want: string): Uint8Array {
  for (let rest = b; rest.length; ) {
    const one = firstEvent(type, rest);
    if (!one.length) break;
    const pb = type.startsWith(PB);
    const t = pb ? new WatchDecoder().push(one)[0]?.type : (JSON.parse(text(one)) as { type: string }).type;
    if (t === want) return one;
    rest = rest.subarray(one.length);
  }
  throw new Error(`no ${want} event in the answer`);
}
