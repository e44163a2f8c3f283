// Issue 20 as a user met it, as deployed: objects a real API server holds or
// a newer one sends (a cluster IP and an endpoint address with leading zeros
// from before 1.33, a source range with spaces around it, an
// internalTrafficPolicy value and a Service type this version does not know)
// reach the whole kpng process (--kubeconfig against the real kube-apiserver
// 1.36.2, and --input edited in place, nft backend), and a client outside the
// node gets through to each service as kube-proxy 1.36 would program it,
// where kpng used to drop the whole Service (its cluster IP refused
// connections).
//
// The API server refuses to write what its version's validation refuses
// (leading zeros since 1.33, values it does not know): those objects are put
// in its etcd as JSON, as an older version stored them or a newer replica of
// an HA control plane mid-upgrade writes them; it serves them as it holds
// them, through its watch cache. What it accepts goes through kubectl.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { v4 } from "../fixtures/addresses.ts";
import { settledChecks, wanted, type Check, type K8sObject } from "../deployed/cluster.ts";
import { deleteInEtcd, deploy, putInEtcd, type Deployed, type SourceKind } from "../deployed/rig.ts";
import { haveK8s } from "../harness/kube-apiserver.ts";
import { LOADED_WAIT_MS } from "../harness/kpng-process.ts";

const ns = "skew";
const zeros = (ip: string) =>
  ip
    .split(".")
    .map((o) => o.padStart(3, "0"))
    .join(".");
const http = { name: "http", protocol: "TCP", port: 80, targetPort: 8080 };

/** an object this API server version would refuse to write: put in its etcd */
const pastValidation = "kpng.test/past-validation";

function service(name: string, spec: Record<string, unknown>, status: Record<string, unknown> = { loadBalancer: {} }, refused = false) {
  const ip = spec.clusterIP as string;
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: { name, namespace: ns, ...(refused && { annotations: { [pastValidation]: "true" } }) },
    spec: { type: "ClusterIP", clusterIPs: [ip], ipFamilies: ["IPv4"], ports: [http], ...spec },
    status,
  };
}
function slice(svc: string, address: string, nodeName: string, refused = false) {
  return {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: {
      name: `${svc}-x`,
      namespace: ns,
      labels: { "kubernetes.io/service-name": svc },
      ...(refused && { annotations: { [pastValidation]: "true" } }),
    },
    addressType: "IPv4",
    endpoints: [{ addresses: [address], conditions: { ready: true, serving: true, terminating: false }, nodeName }],
    ports: [{ name: "http", protocol: "TCP", port: 8080 }],
  };
}

const ips = {
  oldIP: v4.clusterIP(60),
  lb: v4.clusterIP(61),
  lbIngress: v4.external(21),
  policy: v4.clusterIP(62),
  newType: v4.clusterIP(63),
};
const newTypePort = 30093;

function skewed(d: Deployed): Record<string, unknown>[] {
  const pod = (i: number) => d.topo.pods[i].v4;
  return [
    service("old-ip", { clusterIP: zeros(ips.oldIP), clusterIPs: [zeros(ips.oldIP)] }, undefined, true),
    slice("old-ip", zeros(pod(0)), "node-a", true),
    service(
      "lb-spaces",
      {
        type: "LoadBalancer",
        clusterIP: ips.lb,
        ports: [{ ...http, nodePort: 30091 }],
        loadBalancerSourceRanges: [` ${d.topo.client.v4}/32 `, "198.18.200.0/24"],
      },
      { loadBalancer: { ingress: [{ ip: ips.lbIngress, ipMode: "VIP" }] } },
    ),
    slice("lb-spaces", pod(1), "node-a"),
    service("new-policy", { clusterIP: ips.policy, internalTrafficPolicy: "PreferClose" }, undefined, true),
    slice("new-policy", pod(2), "node-b"),
    service("new-type", { type: "FutureType", clusterIP: ips.newType, ports: [{ ...http, nodePort: newTypePort }] }, undefined, true),
    slice("new-type", pod(0), "node-a"),
  ];
}

function skewChecks(d: Deployed): Check[] {
  return [
    {
      name: "a cluster IP with leading zeros (before 1.33) is served at its decimal address",
      probes: [{ ip: ips.oldIP, port: 80 }],
      want: "pod0",
    },
    { name: "a source range with spaces around: a client inside it is served", probes: [{ ip: ips.lbIngress, port: 80 }], want: "pod1" },
    {
      name: "a source range with spaces around: a client outside it is dropped",
      probes: [{ ip: ips.lbIngress, port: 80, src: v4.client(2), timeout: 0.5 }],
      want: "timeout",
    },
    {
      name: "an unknown internalTrafficPolicy is Cluster: an endpoint on another node serves",
      probes: [{ ip: ips.policy, port: 80 }],
      want: "pod2",
    },
    { name: "an unknown Service type: its cluster IP serves", probes: [{ ip: ips.newType, port: 80 }], want: "pod0" },
    { name: "an unknown Service type: its node port serves", probes: [{ ip: d.topo.node.v4, port: newTypePort }], want: "pod0" },
  ];
}

const real = haveK8s("objects of other API server versions from the real kube-apiserver");

for (const source of ["api", "file"] as SourceKind[]) {
  describe.skipIf(source === "api" && !real)(
    `objects of other API server versions, ${source === "api" ? "--kubeconfig" : "--input"} --backend nft`,
    () => {
      let d: Deployed;
      /** the etcd keys written past the API server */
      const stored: string[] = [];
      beforeAll(async () => {
        d = await deploy({ source, backend: "nft", prefix: source === "api" ? "kpsa" : "kpsf" });
        const syncs = d.syncs();
        const objs = skewed(d);
        const refused = (o: Record<string, unknown>) => !!(o.metadata as { annotations?: object }).annotations;
        const api = d.api;
        if (!api) await d.apply(...(objs as unknown as K8sObject[]));
        else {
          await d.apply(...(objs.filter((o) => !refused(o)) as unknown as K8sObject[]));
          for (const o of objs.filter(refused)) {
            const m = o.metadata as { name: string; namespace: string };
            const key = `${o.kind === "Service" ? "services/specs" : "endpointslices"}/${m.namespace}/${m.name}`;
            const { status: _s, ...rest } = o;
            stored.push(key);
            // as the API server stores them (a uid and a creation time), the spec's status with it
            await putInEtcd(api, key, {
              ...rest,
              ...(o.kind === "Service" && { status: o.status }),
              metadata: {
                ...m,
                ...(o.metadata as object),
                uid: crypto.randomUUID(),
                creationTimestamp: new Date().toISOString().replace(/\.\d+Z$/, "Z"),
              },
            });
          }
        }
        await d.syncedAfter(syncs);
      }, 90_000);
      afterAll(async () => {
        // the API server's delete checks (releasing a cluster IP it cannot parse) are not theirs to pass
        for (const key of stored) await deleteInEtcd(d.api!, key);
        await d?.destroy();
      });

      if (source === "api")
        test("the API server serves the objects it refuses to write as they are stored", async () => {
          const spec = async (name: string) =>
            ((await (await d.api!.get(`/api/v1/namespaces/${ns}/services/${name}`)).json()) as { spec?: Record<string, unknown> }).spec;
          expect((await spec("old-ip"))?.clusterIP).toBe(zeros(ips.oldIP));
          expect((await spec("new-policy"))?.internalTrafficPolicy).toBe("PreferClose");
          expect((await spec("new-type"))?.type).toBe("FutureType");
        });

      test("every skewed service is served as kube-proxy 1.36 serves it", async () => {
        const list = skewChecks(d);
        // the apply is several watch events, and the sync waited for may hold only some of them
        expect(await settledChecks(d.topo, list, LOADED_WAIT_MS)).toEqual(wanted(list));
      }, 90_000);

      test("the unknown values are named in WARN lines, once", () => {
        const warns = d.kpng.stderr.filter((l) => l.includes(" WARN ") && l.includes("unknown value"));
        expect(warns.filter((l) => l.includes("skew/new-policy spec.internalTrafficPolicy"))).toHaveLength(1);
        expect(warns.filter((l) => l.includes("skew/new-type spec.type"))).toHaveLength(1);
      });
    },
  );
}
