// EndpointMap reads like the Map it replaced, below and above the size where
// lookups switch from a scan to an index.

import { describe, expect, test } from "bun:test";
import { create } from "@bufbuild/protobuf";
import { EndpointSchema, type Endpoint } from "../../src/gen/localv1/services_pb.ts";
import { EndpointMap } from "../../src/core/brain/endpoint-map.ts";

describe("EndpointMap", () => {
  for (const n of [0, 1, 16, 17, 5000]) {
    test(`${n} endpoints: the same answers as a Map`, () => {
      const keys = Array.from({ length: n }, (_, i) => `pod-${n - i}`); // not sorted: order is kept as given
      const eps = keys.map((k): Endpoint => create(EndpointSchema, { Hostname: k }));
      const m = new EndpointMap(keys.slice(), eps.slice());
      const want = new Map(keys.map((k, i) => [k, eps[i]]));
      expect(m.size).toBe(want.size);
      expect([...m]).toEqual([...want]);
      expect([...m.keys()]).toEqual([...want.keys()]);
      expect([...m.values()]).toEqual([...want.values()]);
      const seen: string[] = [];
      m.forEach((ep, k, self) => {
        expect(self).toBe(m);
        expect(ep).toBe(want.get(k)!);
        seen.push(k);
      });
      expect(seen).toEqual(keys);
      for (const k of [...keys, "pod-0", "absent", ""]) {
        expect(m.get(k)).toBe(want.get(k)!);
        expect(m.has(k)).toBe(want.has(k));
      }
    });
  }
});
