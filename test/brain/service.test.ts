// The node-independent half: which services are served and how each field of
// the localv1.Service is derived.

import { describe, expect, test } from "bun:test";
import { clone, type DescMessage } from "@bufbuild/protobuf";
import { Protocol, ServiceSchema } from "../../src/gen/localv1/services_pb.ts";
import { serviceModel } from "../../src/core/brain/model/service.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { svc } from "../fixtures/k8s.ts";
import { localState } from "./helpers.ts";
import { parseObject } from "../../src/core/brain/k8s/objects.ts";
import type { K8sService } from "../../src/core/brain/k8s/objects.ts";

const served = (s: K8sService, serviceProxyName = "") => localState([s], "node-1", { serviceProxyName }).services.has("default/web");
const model = (s: K8sService) => localState([s]).services.get("default/web")!.service;

describe("which services are served", () => {
  const raw = (spec: object, labels?: object) =>
    parseObject({ kind: "Service", metadata: { name: "web", namespace: "default", labels }, spec }) as { ok: true; object: K8sService };
  const cases: Array<{ name: string; svc: K8sService; proxyName?: string; want: boolean }> = [
    { name: "a ClusterIP service is served", svc: svc(), want: true },
    { name: "ExternalName services are skipped", svc: raw({ type: "ExternalName", externalName: "example.com" }).object, want: false },
    {
      name: "headless services (clusterIP None) are skipped",
      svc: raw({ clusterIP: "None", clusterIPs: ["None"], ports: [{ port: 80 }] }).object,
      want: false,
    },
    { name: "a service without an allocated cluster IP is skipped", svc: raw({ ports: [{ port: 80 }] }).object, want: false },
    {
      name: "service-proxy-name label for another proxy: skipped",
      svc: svc({ labels: { "service.kubernetes.io/service-proxy-name": "mesh" } }),
      want: false,
    },
    {
      name: "service-proxy-name label matching --service-proxy-name: served",
      svc: svc({ labels: { "service.kubernetes.io/service-proxy-name": "mesh" } }),
      proxyName: "mesh",
      want: true,
    },
    { name: "unlabelled services are served whatever --service-proxy-name says", svc: svc(), proxyName: "mesh", want: true },
  ];
  for (const c of cases) test(c.name, () => expect(served(c.svc, c.proxyName)).toBe(c.want));
});

describe("service fields", () => {
  test("cluster IPs per family, following ipFamilies", () => {
    const m = model(svc({ clusterIPs: [v6.clusterIP(1), v4.clusterIP(1)] }));
    expect(m.IPs!.ClusterIPs!.V4).toEqual([v4.clusterIP(1)]);
    expect(m.IPs!.ClusterIPs!.V6).toEqual([v6.clusterIP(1)]);
  });

  test("a cluster IP of a family not in ipFamilies is dropped", () => {
    const m = model(svc({ clusterIPs: [v4.clusterIP(1), v6.clusterIP(1)], ipFamilies: ["IPv4"] }));
    expect(m.IPs!.ClusterIPs!.V6).toEqual([]);
  });

  test("external IPs split by family", () => {
    const m = model(svc({ externalIPs: [v4.external(1), v6.external(1)] }));
    expect(m.IPs!.ExternalIPs).toMatchObject({ V4: [v4.external(1)], V6: [v6.external(1)] });
  });

  test("LB ingress IPs are service IPs, except those with ipMode Proxy", () => {
    const m = model(
      svc({
        type: "LoadBalancer",
        lbIngress: [{ ip: v4.external(1) }, { ip: v4.external(2), ipMode: "Proxy" }, { ip: v4.external(3), ipMode: "VIP" }],
      }),
    );
    expect(m.IPs!.LoadBalancerIPs!.V4).toEqual([v4.external(1), v4.external(3)]);
  });

  test("LB ingress IPs of a service that is no longer a LoadBalancer are ignored", () => {
    expect(model(svc({ type: "NodePort", lbIngress: [{ ip: v4.external(1) }] })).IPs!.LoadBalancerIPs!.V4).toEqual([]);
  });

  test("loadBalancerSourceRanges become an IPFilter on the LB IPs", () => {
    const m = model(svc({ type: "LoadBalancer", lbIngress: [{ ip: v4.external(1) }], sourceRanges: ["198.18.128.0/24"] }));
    expect(m.IPFilters.map((f) => [f.TargetIPs!.V4, f.SourceRanges])).toEqual([[[v4.external(1)], ["198.18.128.0/24"]]]);
  });

  test("session affinity ClientIP: default timeout 10800 s, or the configured one", () => {
    const d = model(svc({ affinity: true })).SessionAffinity;
    expect(d.case === "ClientIP" && d.value.TimeoutSeconds).toBe(10800);
    const c = model(svc({ affinity: 600 })).SessionAffinity;
    expect(c.case === "ClientIP" && c.value.TimeoutSeconds).toBe(600);
    expect(model(svc()).SessionAffinity.case).toBeUndefined();
  });

  test("ports: protocol, node port only for NodePort/LoadBalancer, numeric or named target port", () => {
    const ports = [
      { name: "http", protocol: "TCP" as const, port: 80, targetPort: "web", nodePort: 30080 },
      { name: "dns", protocol: "UDP" as const, port: 53, targetPort: 5353, nodePort: 30053 },
      { name: "sig", protocol: "SCTP" as const, port: 3868 },
    ];
    const np = model(svc({ type: "NodePort", ports }));
    expect(np.Ports.map((p) => [p.Name, p.Protocol, p.Port, p.NodePort, p.TargetPort, p.TargetPortName])).toEqual([
      ["http", Protocol.TCP, 80, 30080, 0, "web"],
      ["dns", Protocol.UDP, 53, 30053, 5353, ""],
      ["sig", Protocol.SCTP, 3868, 0, 3868, ""],
    ]);
    expect(model(svc({ ports })).Ports.map((p) => p.NodePort)).toEqual([0, 0, 0]);
  });

  test("policies: eTP=Local only for externally accessible services; health-check node port only for LoadBalancer eTP=Local", () => {
    const lb = model(svc({ type: "LoadBalancer", eTP: "Local", iTP: "Local", healthCheckNodePort: 32000 }));
    expect([lb.ExternalTrafficToLocal, lb.InternalTrafficToLocal, lb.HealthCheckNodePort]).toEqual([true, true, 32000]);
    const np = model(svc({ type: "NodePort", eTP: "Local", healthCheckNodePort: 32000 }));
    expect([np.ExternalTrafficToLocal, np.HealthCheckNodePort]).toEqual([true, 0]);
    expect(model(svc({ eTP: "Local" })).ExternalTrafficToLocal).toBe(false);
  });
});

/** every message in `msg` has its keys in create()'s order: $typeName, then the schema's members as declared */
function expectCreateOrder(desc: DescMessage, msg: Record<string, unknown>) {
  expect(Object.keys(msg)).toEqual(["$typeName", ...desc.members.map((m) => m.localName)]);
  for (const f of desc.fields) {
    const val = f.oneof ? (msg[f.oneof.localName] as { case?: string; value?: unknown }) : msg[f.localName];
    if (f.fieldKind === "message") {
      const inner = f.oneof ? ((val as { case?: string }).case === f.localName ? (val as { value: unknown }).value : undefined) : val;
      if (inner) expectCreateOrder(f.message, inner as Record<string, unknown>);
    }
    if (f.fieldKind === "list" && f.listKind === "message")
      for (const x of val as Array<Record<string, unknown>>) expectCreateOrder(f.message, x);
  }
}

describe("the model as protobuf-es makes messages", () => {
  // serviceModel writes object literals, not create(): each must be what
  // protobuf-es's reflection makes of it, every field set, keys in create()'s order.
  const cases: Array<{ name: string; svc: K8sService }> = [
    { name: "ClusterIP", svc: svc() },
    {
      name: "dual-stack NodePort, eTP=Local, named target port",
      svc: svc({
        type: "NodePort",
        clusterIPs: [v4.clusterIP(1), v6.clusterIP(1)],
        eTP: "Local",
        ports: [{ name: "http", protocol: "TCP", port: 80, targetPort: "web", nodePort: 30080 }],
      }),
    },
    {
      name: "LoadBalancer with everything",
      svc: svc({
        type: "LoadBalancer",
        labels: { app: "web" },
        externalIPs: [v4.external(1), v6.external(1)],
        lbIngress: [{ ip: v4.external(2) }],
        sourceRanges: ["198.18.128.0/24"],
        affinity: 600,
        eTP: "Local",
        iTP: "Local",
        healthCheckNodePort: 32000,
      }),
    },
    {
      name: "a namespace-less, label-less service",
      svc: {
        kind: "Service",
        metadata: { name: "web", labels: null },
        spec: { type: "ClusterIP", clusterIP: v4.clusterIP(1) },
      } as K8sService,
    },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const m = serviceModel(c.svc);
      expect(m).toStrictEqual(clone(ServiceSchema, m));
      expectCreateOrder(ServiceSchema, m as never);
    });
  }
});
