// sameService: the brain's equality of two localv1 Services (and the
// toolkit's), hand-written so that a node never builds the generated file's
// descriptor registry. It must see every field protobuf equality sees.

import { create, equals, type DescField } from "@bufbuild/protobuf";
import { describe, expect, test } from "bun:test";
import { SERVICE_FIELDS, sameService } from "../../src/core/brain/same-service.ts";
import { Protocol } from "../../src/core/protocol.ts";
import { ServiceSchema, type Service } from "../../src/gen/localv1/services_pb.ts";
import { v4, v6 } from "../fixtures/addresses.ts";

const base = () =>
  create(ServiceSchema, {
    Namespace: "shop",
    Name: "web",
    Type: "LoadBalancer",
    IPs: {
      ClusterIPs: { V4: [v4.clusterIP(1)], V6: [v6.clusterIP(1)] },
      ExternalIPs: { V4: [v4.external(1)], V6: [] },
      Headless: false,
      LoadBalancerIPs: { V4: [v4.external(2)], V6: [v6.external(2)] },
    },
    MapIP: false,
    Ports: [{ Name: "http", Protocol: Protocol.TCP, Port: 80, NodePort: 30080, TargetPort: 8080, TargetPortName: "web" }],
    ExternalTrafficToLocal: true,
    Labels: { app: "web" },
    Annotations: { note: "x" },
    IPFilters: [{ TargetIPs: { V4: [v4.external(2)], V6: [] }, SourceRanges: ["10.0.0.0/8"] }],
    SessionAffinity: { case: "ClientIP", value: { TimeoutSeconds: 10800 } },
    InternalTrafficToLocal: false,
    HealthCheckNodePort: 32000,
  });

/** one change per field sameService must see, and the shapes around them (unset messages, lengths, keys) */
const changes: Record<string, (s: Service) => void> = {
  Namespace: (s) => (s.Namespace = "shop2"),
  Name: (s) => (s.Name = "api"),
  Type: (s) => (s.Type = "NodePort"),
  "IPs.ClusterIPs.V4": (s) => (s.IPs!.ClusterIPs!.V4 = [v4.clusterIP(2)]),
  "IPs.ClusterIPs.V6": (s) => (s.IPs!.ClusterIPs!.V6 = []),
  "IPs.ExternalIPs.V4": (s) => s.IPs!.ExternalIPs!.V4.push(v4.external(3)),
  "IPs.ExternalIPs.V6": (s) => (s.IPs!.ExternalIPs!.V6 = [v6.external(1)]),
  "IPs.Headless": (s) => (s.IPs!.Headless = true),
  "IPs.LoadBalancerIPs.V4": (s) => (s.IPs!.LoadBalancerIPs!.V4 = [v4.external(4)]),
  "IPs.LoadBalancerIPs.V6": (s) => (s.IPs!.LoadBalancerIPs!.V6 = [v6.external(4)]),
  MapIP: (s) => (s.MapIP = true),
  "Ports.Name": (s) => (s.Ports[0].Name = "https"),
  "Ports.Protocol": (s) => (s.Ports[0].Protocol = Protocol.UDP),
  "Ports.Port": (s) => (s.Ports[0].Port = 81),
  "Ports.NodePort": (s) => (s.Ports[0].NodePort = 30081),
  "Ports.TargetPort": (s) => (s.Ports[0].TargetPort = 8081),
  "Ports.TargetPortName": (s) => (s.Ports[0].TargetPortName = "web2"),
  ExternalTrafficToLocal: (s) => (s.ExternalTrafficToLocal = false),
  Labels: (s) => (s.Labels.app = "api"),
  Annotations: (s) => (s.Annotations = { other: "x" }),
  "IPFilters.TargetIPs.V4": (s) => (s.IPFilters[0].TargetIPs!.V4 = [v4.external(5)]),
  "IPFilters.TargetIPs.V6": (s) => (s.IPFilters[0].TargetIPs!.V6 = [v6.external(5)]),
  "IPFilters.SourceRanges": (s) => (s.IPFilters[0].SourceRanges = ["10.0.0.0/16"]),
  "SessionAffinity.ClientIP.TimeoutSeconds": (s) => (s.SessionAffinity.value!.TimeoutSeconds = 60),
  InternalTrafficToLocal: (s) => (s.InternalTrafficToLocal = true),
  HealthCheckNodePort: (s) => (s.HealthCheckNodePort = 32001),
  "IPs unset": (s) => (s.IPs = undefined),
  "IPs.ClusterIPs unset": (s) => (s.IPs!.ClusterIPs = undefined),
  "IPFilters.TargetIPs unset": (s) => (s.IPFilters[0].TargetIPs = undefined),
  "no session affinity": (s) => (s.SessionAffinity = { case: undefined }),
  "one more port": (s) => s.Ports.push({ ...s.Ports[0], Name: "other" }),
  "no IP filter": (s) => (s.IPFilters = []),
  "one more label": (s) => (s.Labels.tier = "front"),
  "a label's key renamed": (s) => (s.Labels = { App: "web" }),
};

describe("sameService: every field protobuf equality compares", () => {
  test("every field of the Service schema is compared (a new proto field must be added to sameService)", () => {
    const leaves = (fields: readonly DescField[], prefix = ""): string[] =>
      fields.flatMap((f) => {
        const at = `${prefix}${f.oneof ? `${f.oneof.localName}.` : ""}${f.localName}`;
        return f.message && f.fieldKind !== "map" ? leaves(f.message.fields, `${at}.`) : [at];
      });
    expect(leaves(ServiceSchema.fields).sort()).toEqual([...SERVICE_FIELDS].sort());
    for (const f of SERVICE_FIELDS) expect(Object.keys(changes)).toContain(f);
  });

  test("equal copies are the same service", () => {
    expect(sameService(base(), base())).toBe(true);
    expect(equals(ServiceSchema, base(), base())).toBe(true);
  });

  for (const [field, change] of Object.entries(changes))
    test(`a change of ${field} is a different service, as protobuf equality says`, () => {
      const s = base();
      change(s);
      expect(sameService(base(), s)).toBe(false);
      expect(sameService(s, base())).toBe(false);
      expect(equals(ServiceSchema, base(), s)).toBe(false);
    });
});
