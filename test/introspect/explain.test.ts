// Why an endpoint is left out (explain.ts), per upstream kube-proxy's
// CategorizeEndpoints: each case names the rule, and every case also holds
// the explanation's choice against the brain's own (endpointsModel), so the
// reasons `kpng get` prints can never disagree with what backends program.

import { describe, expect, test } from "bun:test";
import { candidates, endpointsModel, type ScopeOptions } from "../../src/core/brain/model/endpoints.ts";
import { serviceModel } from "../../src/core/brain/model/service.ts";
import { explainEndpoints } from "../../src/core/introspect/explain.ts";
import { v4 } from "../fixtures/addresses.ts";
import { slice, svc, type EpOpts } from "../fixtures/k8s.ts";

const NODE = "node-1";
const ip = (i: number) => v4.pod(1, i);

interface Case {
  name: string;
  eps: EpOpts[];
  opts?: Partial<Omit<ScopeOptions, "node">>;
  zone?: string;
  /** per endpoint: internal reason ("" = used), external reason */
  want: Array<[string, string]>;
}

const cases: Case[] = [
  { name: "ready endpoints are used", eps: [{ ip: ip(1), node: NODE }], want: [["", "NoExternalTraffic"]] },
  {
    name: "a not-ready endpoint is left out: NotReady",
    eps: [
      { ip: ip(1), node: NODE },
      { ip: ip(2), node: NODE, ready: false, serving: false },
    ],
    want: [
      ["", "NoExternalTraffic"],
      ["NotReady", "NoExternalTraffic"],
    ],
  },
  {
    name: "a serving terminating endpoint beside ready ones is no fallback: Terminating",
    eps: [
      { ip: ip(1), node: NODE },
      { ip: ip(2), node: NODE, ready: false, serving: true, terminating: true },
    ],
    want: [
      ["", "NoExternalTraffic"],
      ["Terminating", "NoExternalTraffic"],
    ],
  },
  {
    name: "no ready endpoint: serving terminating ones are the fallback, not-serving ones NotReady",
    eps: [
      { ip: ip(1), node: NODE, ready: false, serving: true, terminating: true },
      { ip: ip(2), node: NODE, ready: false, serving: false, terminating: true },
    ],
    want: [
      ["", "NoExternalTraffic"],
      ["NotReady", "NoExternalTraffic"],
    ],
  },
  {
    name: "iTP=Local: another node's endpoint is OtherNode",
    eps: [
      { ip: ip(1), node: NODE },
      { ip: ip(2), node: "node-2" },
    ],
    opts: { internalLocal: true },
    want: [
      ["", "NoExternalTraffic"],
      ["OtherNode", "NoExternalTraffic"],
    ],
  },
  {
    name: "eTP=Local with external traffic: internal uses both, external only this node's",
    eps: [
      { ip: ip(1), node: NODE },
      { ip: ip(2), node: "node-2" },
    ],
    opts: { externalLocal: true, external: true },
    want: [
      ["", ""],
      ["", "OtherNode"],
    ],
  },
  {
    name: "eTP=Local, no local ready endpoint: a local serving terminating one is the fallback",
    eps: [
      { ip: ip(1), node: NODE, ready: false, serving: true, terminating: true },
      { ip: ip(2), node: "node-2" },
    ],
    opts: { externalLocal: true, external: true },
    want: [
      ["Terminating", ""],
      ["", "OtherNode"],
    ],
  },
  {
    name: "zone hints naming this node's zone: another zone's endpoint is TopologyZone",
    eps: [
      { ip: ip(1), node: NODE, forZones: ["a"] },
      { ip: ip(2), node: "node-2", forZones: ["b"] },
    ],
    zone: "a",
    want: [
      ["", "NoExternalTraffic"],
      ["TopologyZone", "NoExternalTraffic"],
    ],
  },
  {
    name: "node hints win over zone hints: TopologyNode",
    eps: [
      { ip: ip(1), node: NODE, forNodes: [NODE], forZones: ["a"] },
      { ip: ip(2), node: "node-2", forNodes: ["node-2"], forZones: ["a"] },
    ],
    zone: "a",
    want: [
      ["", "NoExternalTraffic"],
      ["TopologyNode", "NoExternalTraffic"],
    ],
  },
  {
    name: "hints on only some ready endpoints are ignored: all used",
    eps: [
      { ip: ip(1), node: NODE, forZones: ["a"] },
      { ip: ip(2), node: "node-2" },
    ],
    zone: "a",
    want: [
      ["", "NoExternalTraffic"],
      ["", "NoExternalTraffic"],
    ],
  },
];

describe("why an endpoint is left out", () => {
  test.each(cases)("$name", (c) => {
    const service = serviceModel(svc({ clusterIPs: [v4.clusterIP(10)] }), [v4.clusterIP(10)]);
    const opts: ScopeOptions = {
      internalLocal: false,
      externalLocal: false,
      external: false,
      ...c.opts,
      node: { name: NODE, zone: c.zone ?? "" },
    };
    const cands = candidates([slice({ endpoints: c.eps })], new Set(["v4"]), NODE);
    const explained = explainEndpoints(cands, opts);
    expect(explained.map((e) => [e.internal.reason ?? "", e.external.reason ?? ""])).toEqual(c.want);
    for (const e of explained) if (!e.internal.used || !e.external.used) expect(e.internal.message ?? e.external.message).toBeTruthy();
    // the same choice as the brain's
    const model = endpointsModel(service, cands, opts);
    const chosen = explained.map((e) => {
      const ep = model.get(e.candidate.key);
      return [e.candidate.ip, !!ep?.Scopes?.Internal, !!ep?.Scopes?.External];
    });
    expect(explained.map((e) => [e.candidate.ip, e.internal.used, opts.external && e.external.used])).toEqual(chosen);
  });
});
