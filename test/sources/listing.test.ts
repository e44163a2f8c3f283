// The listing turns lists and watched versions into the events that change
// something: an object that comes back equal (a relist, a resourceVersion
// bump, keys in another order) costs nothing downstream.

import { describe, expect, test } from "bun:test";
import { ClusterIndex, newTouched, type ClusterEvent } from "../../src/core/brain/cluster.ts";
import { parseObject, type K8sObject } from "../../src/core/brain/k8s/objects.ts";
import { Listing, sameJSON } from "../../src/core/sources/listing.ts";
import { slice, svc } from "../fixtures/k8s.ts";

const parsed = (raw: unknown): K8sObject => {
  const r = parseObject(raw);
  if (!r.ok) throw new Error("fixture invalid");
  return r.object;
};

describe("sameJSON", () => {
  const cases: Array<{ name: string; a: unknown; b: unknown; same: boolean }> = [
    { name: "equal objects, keys in another order", a: { x: 1, y: [1, "a"] }, b: { y: [1, "a"], x: 1 }, same: true },
    { name: "an undefined key equals an absent one", a: { x: 1, y: undefined }, b: { x: 1 }, same: true },
    { name: "a key more", a: { x: 1 }, b: { x: 1, y: 2 }, same: false },
    { name: "a changed nested value", a: { x: { y: [true] } }, b: { x: { y: [false] } }, same: false },
    { name: "arrays of other lengths", a: [1, 2], b: [1, 2, 3], same: false },
    { name: "array vs object", a: { 0: 1 }, b: [1], same: false },
    { name: "null vs object", a: null, b: {}, same: false },
  ];
  for (const c of cases) test(c.name, () => expect(sameJSON(c.a, c.b)).toBe(c.same));
});

describe("Listing", () => {
  /** a listing over an index that applies what the listing sends, as the brain does */
  const listing = () => {
    const index = new ClusterIndex();
    const l = new Listing(index);
    const sent = (evs: ClusterEvent[]) => {
      for (const e of evs) index.apply(e, newTouched());
      return evs;
    };
    return { l, sent };
  };

  test("an object listed again unchanged, with a new resourceVersion, gives no event", () => {
    const { l, sent } = listing();
    const raw = svc({ name: "web" });
    expect(sent(l.upsert(parsed(raw)))).toHaveLength(1);
    const again = structuredClone(raw) as { metadata: { resourceVersion?: string } };
    again.metadata.resourceVersion = "999";
    expect(l.upsert(parsed(again))).toEqual([]);
  });

  test("a changed object is an upsert; a complete list without it deletes it", () => {
    const { l, sent } = listing();
    const a = parsed(slice({ service: "web", endpoints: [{ ip: "198.19.1.5" }] }));
    sent(l.upsert(a));
    const b = parsed(slice({ service: "web", endpoints: [{ ip: "198.19.1.6" }] }));
    expect(sent(l.upsert(b))).toEqual([{ type: "upsert", object: b }]);
    expect(l.missing("Service", new Set())).toEqual([]);
    const ns = b.metadata.namespace!;
    expect(l.missing("EndpointSlice", new Set())).toEqual([
      { type: "delete", kind: "EndpointSlice", namespace: ns, name: b.metadata.name },
    ]);
    expect(l.missing("EndpointSlice", new Set([`EndpointSlice/${ns}/${b.metadata.name}`]))).toEqual([]);
  });

  test("a delete of an object never sent, or sent and deleted, gives no event", () => {
    const { l, sent } = listing();
    expect(l.delete("Service", "default", "web")).toEqual([]);
    sent(l.upsert(parsed(svc({ name: "web" }))));
    expect(sent(l.delete("Service", "default", "web"))).toHaveLength(1);
    expect(l.delete("Service", "default", "web")).toEqual([]);
  });
});
