// Fills the real API server's etcd with the bench cluster directly, run by
// bench/bench-api.ts inside the control plane's network namespace (`ip netns
// exec NS bun bench/etcd-fill.ts SERVICES POD_V6`), where etcd listens on
// 127.0.0.1:2379.
//
// Why not POSTs: each Service create allocates its cluster IP (an IPAddress
// object), validates, defaults and writes through admission; on a loaded
// 2-core host 10,000 services took 703 s that way, and 50,000 would take an
// hour. kube-apiserver reads what etcd holds as it reads its own writes: its
// storage decoder recognises JSON as well as protobuf, applies defaults on
// decode, and takes resourceVersion from etcd's mod_revision; its watch cache
// follows etcd's watch, so objects put here are listed and watched like any
// other. Each Service's IPAddress (networking.k8s.io/v1, the allocator's
// record since MultiCIDRServiceAllocator went GA) is written too, so the
// API server's IP repair loop finds nothing to fix (and writes no event per
// service) while kpng is measured.
//
// Writes go through etcd's gRPC gateway (/v3/kv/txn, JSON), 128 puts per
// transaction (etcd's default --max-txn-ops), a few transactions in flight.
// Prints `filled <objects> <revision>` at the end.

import { service, slice } from "./startup-api-server.ts";

const ETCD = "http://127.0.0.1:2379";
const TXN_OPS = 128;
const IN_FLIGHT = 4;

const b64 = (s: string) => Buffer.from(s).toString("base64");

type Put = { key: string; value: unknown };

function servicePuts(i: number, services: number, podV6: string): Put[] {
  const svc = service(i);
  const sl = slice(i, services, podV6);
  const { namespace: ns, name } = svc.metadata;
  const ip = svc.spec.clusterIP;
  return [
    { key: `/registry/services/specs/${ns}/${name}`, value: { apiVersion: "v1", ...svc } },
    { key: `/registry/endpointslices/${ns}/${sl.metadata.name}`, value: { apiVersion: "discovery.k8s.io/v1", ...sl } },
    {
      key: `/registry/ipaddresses/${ip}`,
      value: {
        apiVersion: "networking.k8s.io/v1",
        kind: "IPAddress",
        metadata: {
          name: ip,
          uid: `00000005-0000-4000-8000-${i.toString(16).padStart(12, "0")}`,
          creationTimestamp: svc.metadata.creationTimestamp,
          labels: { "ipaddress.kubernetes.io/ip-family": "IPv6", "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io" },
        },
        spec: { parentRef: { group: "", resource: "services", namespace: ns, name } },
      },
    },
  ];
}

async function txn(puts: Put[]): Promise<number> {
  const body = { success: puts.map((p) => ({ requestPut: { key: b64(p.key), value: b64(JSON.stringify(p.value)) } })) };
  const res = await fetch(`${ETCD}/v3/kv/txn`, { method: "POST", body: JSON.stringify(body) });
  if (!res.ok) throw new Error(`etcd txn: ${res.status} ${await res.text()}`);
  const out = (await res.json()) as { header?: { revision?: string } };
  return Number(out.header?.revision ?? 0);
}

export async function fillEtcd(services: number, podV6: string): Promise<{ objects: number; revision: number }> {
  let next = 0;
  let objects = 0;
  let revision = 0;
  const worker = async () => {
    while (next < services) {
      const from = next;
      const to = Math.min(services, from + Math.floor(TXN_OPS / 3));
      next = to;
      const puts: Put[] = [];
      for (let i = from; i < to; i++) puts.push(...servicePuts(i, services, podV6));
      revision = Math.max(revision, await txn(puts));
      objects += puts.length;
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  return { objects, revision };
}

if (import.meta.main) {
  const [servicesArg, podV6] = process.argv.slice(2);
  const services = Number(servicesArg);
  if (!Number.isInteger(services) || services < 1 || !podV6) throw new Error("usage: etcd-fill.ts SERVICES POD_V6");
  const { objects, revision } = await fillEtcd(services, podV6);
  console.log(`filled ${objects} ${revision}`);
}
