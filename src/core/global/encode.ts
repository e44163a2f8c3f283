// The brain's index -> globalv1 items (the cluster-wide model node agents
// read): one ServiceInfo per proxied service, one EndpointInfo per endpoint
// of its slices, one NodeInfo per node. Pure: data in, bytes out.
//
// An item carries what the brain's rules read and nothing else, so that
// decode.ts can rebuild objects the same brain code turns into the same
// node-local state (see decode.ts for the round trip).

import { create, toBinary } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { EndpointInfoSchema, NodeSchema, type EndpointInfo } from "../../gen/globalv1/global_pb.ts";
import { ServiceSchema, type Service } from "../../gen/localv1/services_pb.ts";
import { ZONE_LABEL } from "../brain/brain.ts";
import type { Family } from "../net/ip.ts";
import type { K8sEndpointSlice, K8sNode } from "../brain/k8s/objects.ts";
import { SERVICE_NAME_LABEL, sliceFamily } from "../brain/model/endpoints.ts";
import { hash64 } from "../wire/item-hash.ts";

/** kpng's global paths: `namespace|name|source|key` (a node is `|name||`, a service `ns|name||`). */
export const globalPath = (namespace: string, name: string, source = "", key = "") => `${namespace}|${name}|${source}|${key}`;

export function splitGlobalPath(path: string): [string, string, string, string] {
  const p = path.split("|");
  return [p[0] ?? "", p[1] ?? "", p[2] ?? "", p[3] ?? ""];
}

/** `Hash = 1` first, then the body: what toBinary writes for the whole message. */
function withHash(body: Uint8Array): Uint8Array {
  const head = new BinaryWriter().tag(1, WireType.Varint).uint64(hash64(body)).finish();
  const out = new Uint8Array(head.length + body.length);
  out.set(head);
  out.set(body, head.length);
  return out;
}

/** ServiceInfo { Hash=1; Service=2 } around the service's node-independent model. */
export function encodeServiceInfo(model: Service): Uint8Array {
  const svc = toBinary(ServiceSchema, model);
  return withHash(new BinaryWriter().tag(2, WireType.LengthDelimited).bytes(svc).finish());
}

/**
 * The EndpointInfos of one slice, keyed by path `ns|service|slice|ip`. Only
 * slices the brain reads (a service's, not headless, IP addresses) of the
 * families the service serves. An IP listed twice in one slice keeps its
 * first entry (the brain merges such copies; their ports are the slice's).
 */
export function encodeSlice(slice: K8sEndpointSlice, families: ReadonlySet<Family>, out: Map<string, Uint8Array>): void {
  const family = sliceFamily(slice);
  if (!family || !families.has(family)) return;
  const ns = slice.metadata.namespace ?? "";
  const svc = slice.metadata.labels![SERVICE_NAME_LABEL]!;
  const ports = [];
  for (const p of slice.ports ?? []) if (p.port) ports.push({ $typeName: "localv1.PortName" as const, Name: p.name ?? "", Port: p.port });
  for (const ep of slice.endpoints ?? []) {
    const ip = ep.addresses[0]; // kube-proxy reads only the first address
    const path = globalPath(ns, svc, slice.metadata.name, ip);
    if (out.has(path)) continue;
    const c = ep.conditions ?? {};
    const pod = ep.pod ?? "";
    const info: EndpointInfo = create(EndpointInfoSchema, {
      Namespace: ns,
      SourceName: slice.metadata.name,
      ServiceName: svc,
      PodName: pod,
      Endpoint: {
        Hostname: ep.hostname ?? "",
        IPs: { V4: family === "v4" ? [ip] : [], V6: family === "v6" ? [ip] : [] },
        PortOverrides: ports,
      },
      Conditions: { Ready: c.ready ?? true, Serving: c.serving ?? true, Terminating: c.terminating ?? false },
      Topology: { Node: ep.nodeName ?? "", Zone: ep.zone ?? "" },
      Hints: ep.hints
        ? { Zones: ep.hints.forZones?.map((h) => h.name) ?? [], Nodes: ep.hints.forNodes?.map((h) => h.name) ?? [] }
        : undefined,
    });
    out.set(path, withHash(toBinary(EndpointInfoSchema, info)));
  }
}

/**
 * NodeInfo { Hash=1; Node=2 }: name, labels (zone and topology), zone,
 * addresses. Annotations are left out: large on real nodes, unread by proxies.
 */
export function encodeNodeInfo(node: K8sNode): Uint8Array {
  const labels = node.metadata.labels ?? {};
  const msg = create(NodeSchema, {
    Name: node.metadata.name,
    Labels: { ...labels },
    Topology: { Node: node.metadata.name, Zone: labels[ZONE_LABEL] ?? "" },
    Addresses: (node.status?.addresses ?? []).map((a) => ({ Type: a.type, Address: a.address })),
  });
  return withHash(new BinaryWriter().tag(2, WireType.LengthDelimited).bytes(toBinary(NodeSchema, msg)).finish());
}
