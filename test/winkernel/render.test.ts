// Golden HNS call sequences, one Service behaviour per case. Pods on this
// node exist in HNS already (the CNI made them: ids 1..); every new object
// takes the next id.

import { describe, expect, test } from "bun:test";
import type { Config } from "../../src/core/config/config.ts";
import type { HnsCall } from "../../plugins/winkernel/hns.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { type EndpointSpec, type ServiceSpec, endpoint, entry, service } from "../ipvs/services.ts";
import { N1, SRC, createLb, modifyLb, primedRig, remoteEp, send, testConfig } from "./harness.ts";

const C1 = v4.clusterIP(1);
const E1 = v4.external(1);
const E2 = v4.external(2);
const P1 = v4.pod(1, 5); // local: HNS id 1
const P2 = v4.pod(2, 5);
const P3 = v4.pod(3, 5);
const http = { name: "http", port: 80, targetPort: 8080 };
const local = { ips: [P1], local: true };
const remote = { ips: [P2] };

interface Case {
  name: string;
  svc: ServiceSpec;
  eps: Record<string, EndpointSpec>;
  config?: Config;
  local?: string[];
  calls: HnsCall[];
}

const cases: Case[] = [
  {
    name: "cluster IP: one load balancer over the Internal endpoints, source VIP from config",
    svc: { name: "web", clusterIPs: [C1], ports: [http] },
    eps: { a: local, b: remote },
    calls: [remoteEp(2, P2), createLb(3, { eps: [1, 2], vip: C1, internal: 8080, external: 80 })],
  },
  {
    name: "NodePort: one local-routed policy for every host address, over the External endpoints",
    svc: { name: "web", clusterIPs: [C1], ports: [{ ...http, nodePort: 30080 }] },
    eps: { b: { ips: [P2], internal: false } },
    calls: [remoteEp(2, P2), createLb(3, { eps: [2], internal: 8080, external: 30080, portFlags: 2 })],
  },
  {
    name: "external IPs: one policy each, flagged as external VIPs",
    svc: { name: "web", clusterIPs: [C1], externalIPs: [E1, E2], ports: [http] },
    eps: { b: { ips: [P2], internal: false } },
    calls: [
      remoteEp(2, P2),
      createLb(3, { eps: [2], vip: E1, internal: 8080, external: 80, portFlags: 16 }),
      createLb(4, { eps: [2], vip: E2, internal: 8080, external: 80, portFlags: 16 }),
    ],
  },
  {
    name: "LB ingress IPs: one policy each",
    svc: { name: "web", lbIPs: [E1], ports: [http] },
    eps: { b: remote },
    calls: [remoteEp(2, P2), createLb(3, { eps: [2], vip: E1, internal: 8080, external: 80 })],
  },
  {
    name: "preserve-destination annotation: LB ingress through DSR and the MUX",
    svc: { name: "web", lbIPs: [E1], ports: [http], annotations: { "service.kubernetes.io/preserve-destination": "true" } },
    eps: { b: remote },
    calls: [remoteEp(2, P2), createLb(3, { eps: [2], vip: E1, internal: 8080, external: 80, flags: 1, portFlags: 12 })],
  },
  {
    name: "DSR enabled: cluster IP uses DSR, node port only under eTP=Local",
    config: testConfig({ winkernel: { sourceVip: SRC, networkName: "kpng-test", enableDSR: true } }),
    svc: { name: "web", clusterIPs: [C1], ports: [{ ...http, nodePort: 30080 }] },
    eps: { a: local },
    calls: [
      createLb(2, { eps: [1], vip: C1, internal: 8080, external: 80, flags: 1 }),
      createLb(3, { eps: [1], internal: 8080, external: 30080, portFlags: 2 }),
    ],
  },
  {
    name: "DSR enabled and eTP=Local: external policies use DSR too",
    config: testConfig({ winkernel: { sourceVip: SRC, networkName: "kpng-test", enableDSR: true } }),
    svc: { name: "web", clusterIPs: [C1], externalIPs: [E1], ports: [{ ...http, nodePort: 30080 }], eTPLocal: true },
    eps: { a: local },
    calls: [
      createLb(2, { eps: [1], vip: C1, internal: 8080, external: 80, flags: 1 }),
      createLb(3, { eps: [1], internal: 8080, external: 30080, flags: 1, portFlags: 2 }),
      createLb(4, { eps: [1], vip: E1, internal: 8080, external: 80, flags: 1, portFlags: 16 }),
    ],
  },
  {
    name: "ClientIP session affinity: source-IP distribution",
    svc: { name: "web", clusterIPs: [C1], ports: [http], affinitySeconds: 600 },
    eps: { a: local },
    calls: [createLb(2, { eps: [1], vip: C1, internal: 8080, external: 80, dist: 2 })],
  },
  {
    name: "UDP port: protocol 17",
    svc: { name: "dns", clusterIPs: [C1], ports: [{ name: "dns", protocol: "UDP", port: 53, targetPort: 5353 }] },
    eps: { a: local },
    calls: [createLb(2, { eps: [1], vip: C1, proto: 17, internal: 5353, external: 53 })],
  },
  {
    name: "SCTP port: no policy (HNS has no SCTP load balancing)",
    svc: { name: "sig", clusterIPs: [C1], ports: [{ name: "sig", protocol: "SCTP", port: 9000 }] },
    eps: { a: local },
    calls: [],
  },
  {
    name: "no endpoints: no policy",
    svc: { name: "web", clusterIPs: [C1], lbIPs: [E1], ports: [{ ...http, nodePort: 30080 }] },
    eps: {},
    calls: [],
  },
  {
    name: "eTP=Local without a local endpoint: no external policy, cluster IP still served",
    svc: { name: "web", clusterIPs: [C1], lbIPs: [E1], ports: [{ ...http, nodePort: 30080 }], eTPLocal: true },
    eps: { b: { ips: [P2], external: false } },
    calls: [remoteEp(2, P2), createLb(3, { eps: [2], vip: C1, internal: 8080, external: 80 })],
  },
  {
    name: "dual-stack: an IPv6 policy flagged IPv6, its source VIP the node's IPv6 address",
    config: testConfig({ nodeIPs: [N1, v6.node(1)] }),
    svc: { name: "web", clusterIPs: [C1, v6.clusterIP(1)], ports: [http] },
    eps: { a: local, a6: { ips: [v6.pod(1, 5)], local: true } },
    local: [P1, v6.pod(1, 5)],
    calls: [
      createLb(3, { eps: [1], vip: C1, internal: 8080, external: 80 }),
      createLb(4, { eps: [2], vip: v6.clusterIP(1), src: v6.node(1), internal: 8080, external: 80, flags: 2 }),
    ],
  },
  {
    name: "endpoints with another target port: the first address's port wins, the others are left out",
    svc: { name: "web", clusterIPs: [C1], ports: [{ name: "http", port: 80 }] },
    eps: { a: { ...local, ports: { http: 8080 } }, b: { ips: [P2], ports: { http: 8080 } }, c: { ips: [P3], ports: { http: 9090 } } },
    calls: [remoteEp(2, P2), createLb(3, { eps: [1, 2], vip: C1, internal: 8080, external: 80 })],
  },
  {
    name: "no source VIP configured: the node IP of the family",
    config: testConfig({ winkernel: { sourceVip: "", networkName: "kpng-test", enableDSR: false } }),
    svc: { name: "web", clusterIPs: [C1], ports: [http] },
    eps: { a: local },
    calls: [createLb(2, { eps: [1], vip: C1, src: N1, internal: 8080, external: 80 })],
  },
];

describe("winkernel golden HNS calls", () => {
  for (const c of cases) {
    test(c.name, async () => {
      const r = await primedRig(c.local ?? [P1], c.config);
      const eps = Object.fromEntries(Object.entries(c.eps).map(([k, e]) => [k, endpoint(e)]));
      send(r.backend, [entry(service(c.svc), eps)]);
      await r.backend.sync();
      expect(r.hns.calls).toEqual(c.calls);
    });
  }

  test("a remote endpoint shared by two services is created once", async () => {
    const r = await primedRig([]);
    send(r.backend, [
      entry(service({ name: "a", clusterIPs: [C1], ports: [http] }), { b: endpoint(remote) }),
      entry(service({ name: "b", clusterIPs: [v4.clusterIP(2)], ports: [http] }), { b: endpoint(remote) }),
    ]);
    await r.backend.sync();
    expect(r.hns.calls.map((c) => c.call)).toEqual(["HcnCreateEndpoint", "HcnCreateLoadBalancer", "HcnCreateLoadBalancer"]);
  });

  test("a local endpoint the CNI has not created yet is left out, then added when it appears", async () => {
    const r = await primedRig([]);
    send(r.backend, [entry(service({ name: "web", clusterIPs: [C1], ports: [http] }), { a: endpoint(local), b: endpoint(remote) })]);
    await r.backend.sync();
    expect(r.hns.calls.at(-1)).toEqual(createLb(2, { eps: [1], vip: C1, internal: 8080, external: 80 }));
    r.hns.clear();
    r.hns.addLocalEndpoint(P1); // id 3
    r.backend.setEndpoint("default", "web", "a", endpoint(local)); // the next change set touching the service
    await r.backend.sync();
    expect(r.hns.calls).toEqual([{ call: "HcnEnumerateEndpoints" }, modifyLb(2, { eps: [3, 1], vip: C1, internal: 8080, external: 80 })]);
  });
});
