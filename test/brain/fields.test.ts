// A message's fields are described once (src/core/brain/k8s/fields.ts): a
// field added to a table is checked by the hand-written check and by both
// valibot schemas made of it, and read by read.ts as its table says, with
// no other edit. The table of the Service (service-fields.ts) stays what
// the schemas and checks were written as (test/brain/fast-service.test.ts).

import { describe, expect, test } from "bun:test";
import * as v from "valibot";
import { FAIL } from "../../src/core/brain/k8s/fast-check.ts";
import { anyString, entries, enumOf, enumReadings, objectCheck, optional, repeated } from "../../src/core/brain/k8s/fields.ts";
import { parseObject } from "../../src/core/brain/k8s/objects.ts";
import { SERVICE_SPEC } from "../../src/core/brain/k8s/service-fields.ts";

/** the Service spec with spec.trafficDistribution (k8s.io/api core/v1 ServiceSpec field 23, *string), added as one line */
const withTrafficDistribution = {
  ...SERVICE_SPEC,
  trafficDistribution: optional(
    { proto: 23, wire: "atom", presence: "pointer", reading: { reading: "no preference" } },
    enumOf(["PreferClose", "PreferSameZone", "PreferSameNode"]),
  ),
};

const spec = (extra: Record<string, unknown>) => ({ type: "ClusterIP", clusterIP: "198.18.0.10", ...extra });

describe("a field added to a table", () => {
  const check = objectCheck(withTrafficDistribution);
  const wellFormed = v.object(entries(withTrafficDistribution, "wellFormed"));
  const shape = v.object(entries(withTrafficDistribution, "shape"));

  test("a well-formed value: the check and the well-formed schema both keep it, last as the table has it", () => {
    const raw = spec({ trafficDistribution: "PreferClose", externalTrafficPolicy: "Local" });
    const out = check(raw);
    expect(out).toEqual({ ...raw });
    expect(Object.keys(out as object)).toEqual(["type", "clusterIP", "externalTrafficPolicy", "trafficDistribution"]);
    expect(JSON.stringify(v.parse(wellFormed, raw))).toBe(JSON.stringify(out));
  });

  test("a value this version does not know: the check and the well-formed schema refuse it, the shape keeps it, and read.ts's table reads it", () => {
    const raw = spec({ trafficDistribution: "PreferSomewhere" });
    expect(check(raw)).toBe(FAIL);
    expect(v.safeParse(wellFormed, raw).success).toBe(false);
    expect(v.parse(shape, raw)).toMatchObject({ trafficDistribution: "PreferSomewhere" });
    const reading = enumReadings(withTrafficDistribution).find((r) => r.name === "trafficDistribution");
    expect(reading?.known.has("PreferSomewhere")).toBe(false);
    expect(reading?.reading).toBe("no preference");
  });

  test("absent stays absent; a value of the wrong type is refused by all three", () => {
    expect(check(spec({}))).toEqual(spec({}));
    for (const bad of [1, true, {}, ["PreferClose"]]) {
      const raw = spec({ trafficDistribution: bad });
      expect(check(raw)).toBe(FAIL);
      expect(v.safeParse(wellFormed, raw).success).toBe(false);
      expect(v.safeParse(shape, raw).success).toBe(false);
    }
  });

  test("a repeated field: optional, null or a list of checked items, in both schemas", () => {
    const table = { names: repeated({ proto: 1, wire: "string", presence: "omitempty" }, anyString) };
    const c = objectCheck(table);
    const s = v.object(entries(table, "wellFormed"));
    for (const raw of [{}, { names: null }, { names: [] }, { names: ["a", "b"] }]) {
      expect(c(raw)).toEqual(raw);
      expect(v.parse(s, raw)).toEqual(raw as never);
    }
    expect(c({ names: ["a", 1] })).toBe(FAIL);
    expect(v.safeParse(s, { names: ["a", 1] }).success).toBe(false);
  });
});

describe("the Service's table", () => {
  test("read.ts reads each enum of the spec it describes: an unknown value is noted with kube-proxy's reading", () => {
    const readings = enumReadings(SERVICE_SPEC).map((r) => r.name);
    expect(readings).toEqual(["type", "sessionAffinity", "externalTrafficPolicy", "internalTrafficPolicy"]);
    const raw = {
      kind: "Service",
      metadata: { name: "web", namespace: "default" },
      spec: spec({ internalTrafficPolicy: "Nearby", externalTrafficPolicy: "Global", sessionAffinity: "Cookie" }),
    };
    const res = parseObject(raw);
    expect(res.ok && res.notes?.map((n) => `${n.field}: ${n.message}`)).toEqual([
      'spec.sessionAffinity: unknown value "Cookie": no session affinity (kube-proxy 1.36\'s reading)',
      'spec.internalTrafficPolicy: unknown value "Nearby": Cluster (kube-proxy 1.36\'s reading)',
    ]);
  });
});
