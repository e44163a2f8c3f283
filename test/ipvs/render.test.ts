// Golden outputs of a first sync, one Service behaviour per case: what
// `ipvsadm -R`, `ipset restore` and `ip -batch` receive.

import { describe, expect, test } from "bun:test";
import type { Config } from "../../src/core/config/config.ts";
import { plan, v4, v6 } from "../fixtures/addresses.ts";
import { N1, N1v6, applyAndRecord, rig, testConfig } from "./harness.ts";
import { type EndpointSpec, type ServiceSpec, endpoint, entry, nodeState, service } from "./services.ts";

const C1 = v4.clusterIP(1);
const C1v6 = v6.clusterIP(1);
const E1 = v4.external(1);
const E2 = v4.external(2);
const P1 = v4.pod(1, 5); // on this node
const P2 = v4.pod(2, 5); // on another node
const P2v6 = v6.pod(2, 5);
const dev = "dev kube-ipvs0";

interface Case {
  name: string;
  svc: ServiceSpec;
  eps: Record<string, EndpointSpec>;
  config?: Config;
  ipvs: string[];
  sets: string[];
  addresses: string[];
}

const http = { name: "http", port: 80, targetPort: 8080 };
const local = { ips: [P1], local: true };
const remote = { ips: [P2] };

const cases: Case[] = [
  {
    name: "cluster IP: one virtual server per IP and port, internal endpoints as real servers",
    svc: { name: "web", clusterIPs: [C1], ports: [http] },
    eps: { b: remote },
    ipvs: [`-A -t ${C1}:80 -s rr`, `-a -t ${C1}:80 -r ${P2}:8080 -m -w 1`],
    sets: [`add KPNG-CLUSTER-IP ${C1},tcp:80 -exist`],
    addresses: [`address replace ${C1}/32 ${dev}`],
  },
  {
    name: "local endpoint: hairpin entry so a pod reaching itself is masqueraded",
    svc: { name: "web", clusterIPs: [C1], ports: [http] },
    eps: { a: local, b: remote },
    ipvs: [`-A -t ${C1}:80 -s rr`, `-a -t ${C1}:80 -r ${P1}:8080 -m -w 1`, `-a -t ${C1}:80 -r ${P2}:8080 -m -w 1`],
    sets: [`add KPNG-CLUSTER-IP ${C1},tcp:80 -exist`, `add KPNG-LOOP-BACK ${P1},tcp:8080,${P1} -exist`],
    addresses: [`address replace ${C1}/32 ${dev}`],
  },
  {
    name: "no endpoints under Cluster policy: virtual server kept, destination REJECTed",
    svc: { name: "web", clusterIPs: [C1], ports: [http] },
    eps: {},
    ipvs: [`-A -t ${C1}:80 -s rr`],
    sets: [`add KPNG-CLUSTER-IP ${C1},tcp:80 -exist`, `add KPNG-REJECT ${C1},tcp:80 -exist`],
    addresses: [`address replace ${C1}/32 ${dev}`],
  },
  {
    name: "iTP=Local, no local endpoint: cluster IP traffic DROPped",
    svc: { name: "web", clusterIPs: [C1], ports: [http], iTPLocal: true },
    eps: { b: { ips: [P2], internal: false } },
    ipvs: [`-A -t ${C1}:80 -s rr`],
    sets: [`add KPNG-CLUSTER-IP ${C1},tcp:80 -exist`, `add KPNG-DROP ${C1},tcp:80 -exist`],
    addresses: [`address replace ${C1}/32 ${dev}`],
  },
  {
    name: "NodePort: a virtual server per node address, not bound, masqueraded under eTP=Cluster",
    svc: { name: "web", clusterIPs: [C1], ports: [{ ...http, nodePort: 30080 }] },
    eps: { b: remote },
    ipvs: [
      `-A -t ${C1}:80 -s rr`,
      `-a -t ${C1}:80 -r ${P2}:8080 -m -w 1`,
      `-A -t ${N1}:30080 -s rr`,
      `-a -t ${N1}:30080 -r ${P2}:8080 -m -w 1`,
    ],
    sets: [`add KPNG-CLUSTER-IP ${C1},tcp:80 -exist`, `add KPNG-NODE-PORT ${N1},tcp:30080 -exist`],
    addresses: [`address replace ${C1}/32 ${dev}`],
  },
  {
    name: "scopes: Internal endpoints feed cluster IPs, External ones node ports",
    svc: { name: "web", clusterIPs: [C1], ports: [{ ...http, nodePort: 30080 }] },
    eps: { b: { ips: [P2], internal: false, external: true } },
    ipvs: [`-A -t ${C1}:80 -s rr`, `-A -t ${N1}:30080 -s rr`, `-a -t ${N1}:30080 -r ${P2}:8080 -m -w 1`],
    sets: [`add KPNG-CLUSTER-IP ${C1},tcp:80 -exist`, `add KPNG-NODE-PORT ${N1},tcp:30080 -exist`, `add KPNG-REJECT ${C1},tcp:80 -exist`],
    addresses: [`address replace ${C1}/32 ${dev}`],
  },
  {
    name: "eTP=Local NodePort: only local endpoints, client source kept (no masquerade entry)",
    svc: { name: "web", clusterIPs: [C1], ports: [{ ...http, nodePort: 30080 }], eTPLocal: true },
    eps: { a: local, b: { ips: [P2], external: false } },
    ipvs: [
      `-A -t ${C1}:80 -s rr`,
      `-a -t ${C1}:80 -r ${P1}:8080 -m -w 1`,
      `-a -t ${C1}:80 -r ${P2}:8080 -m -w 1`,
      `-A -t ${N1}:30080 -s rr`,
      `-a -t ${N1}:30080 -r ${P1}:8080 -m -w 1`,
    ],
    sets: [`add KPNG-CLUSTER-IP ${C1},tcp:80 -exist`, `add KPNG-LOOP-BACK ${P1},tcp:8080,${P1} -exist`],
    addresses: [`address replace ${C1}/32 ${dev}`],
  },
  {
    name: "eTP=Local, no local endpoint: external destinations DROPped, cluster IP still served",
    svc: { name: "web", clusterIPs: [C1], lbIPs: [E1], ports: [{ ...http, nodePort: 30080 }], eTPLocal: true },
    eps: { b: { ips: [P2], external: false } },
    ipvs: [`-A -t ${C1}:80 -s rr`, `-a -t ${C1}:80 -r ${P2}:8080 -m -w 1`, `-A -t ${E1}:80 -s rr`, `-A -t ${N1}:30080 -s rr`],
    sets: [`add KPNG-CLUSTER-IP ${C1},tcp:80 -exist`, `add KPNG-DROP ${E1},tcp:80 -exist`, `add KPNG-DROP ${N1},tcp:30080 -exist`],
    addresses: [`address replace ${C1}/32 ${dev}`, `address replace ${E1}/32 ${dev}`],
  },
  {
    name: "external IPs: bound and masqueraded under eTP=Cluster",
    svc: { name: "web", clusterIPs: [C1], externalIPs: [E2], ports: [http] },
    eps: { b: remote },
    ipvs: [`-A -t ${C1}:80 -s rr`, `-a -t ${C1}:80 -r ${P2}:8080 -m -w 1`, `-A -t ${E2}:80 -s rr`, `-a -t ${E2}:80 -r ${P2}:8080 -m -w 1`],
    sets: [`add KPNG-CLUSTER-IP ${C1},tcp:80 -exist`, `add KPNG-EXTERNAL-IP ${E2},tcp:80 -exist`],
    addresses: [`address replace ${C1}/32 ${dev}`, `address replace ${E2}/32 ${dev}`],
  },
  {
    name: "load balancer with source ranges: firewall entry and one allowed-source entry per range",
    svc: {
      name: "web",
      clusterIPs: [C1],
      lbIPs: [E1],
      ports: [{ name: "https", port: 443, targetPort: 8443 }],
      sourceRanges: [plan.v4.clientCIDR, plan.v4.nodeCIDR],
    },
    eps: { b: remote },
    ipvs: [
      `-A -t ${C1}:443 -s rr`,
      `-a -t ${C1}:443 -r ${P2}:8443 -m -w 1`,
      `-A -t ${E1}:443 -s rr`,
      `-a -t ${E1}:443 -r ${P2}:8443 -m -w 1`,
    ],
    sets: [
      `add KPNG-CLUSTER-IP ${C1},tcp:443 -exist`,
      `add KPNG-LOAD-BALANCER ${E1},tcp:443 -exist`,
      `add KPNG-LOAD-BALANCER-FW ${E1},tcp:443 -exist`,
      `add KPNG-LOAD-BALANCER-SRC-CIDR ${E1},tcp:443,${plan.v4.clientCIDR} -exist`,
      `add KPNG-LOAD-BALANCER-SRC-CIDR ${E1},tcp:443,${plan.v4.nodeCIDR} -exist`,
    ],
    addresses: [`address replace ${C1}/32 ${dev}`, `address replace ${E1}/32 ${dev}`],
  },
  {
    name: "source range 0.0.0.0/0 is split in two halves (ipset refuses /0)",
    svc: { name: "web", lbIPs: [E1], ports: [http], sourceRanges: ["0.0.0.0/0"] },
    eps: { b: remote },
    ipvs: [`-A -t ${E1}:80 -s rr`, `-a -t ${E1}:80 -r ${P2}:8080 -m -w 1`],
    sets: [
      `add KPNG-LOAD-BALANCER ${E1},tcp:80 -exist`,
      `add KPNG-LOAD-BALANCER-FW ${E1},tcp:80 -exist`,
      `add KPNG-LOAD-BALANCER-SRC-CIDR ${E1},tcp:80,0.0.0.0/1 -exist`,
      `add KPNG-LOAD-BALANCER-SRC-CIDR ${E1},tcp:80,128.0.0.0/1 -exist`,
    ],
    addresses: [`address replace ${E1}/32 ${dev}`],
  },
  {
    name: "ClientIP affinity: persistence with the service's timeout",
    svc: { name: "web", clusterIPs: [C1], ports: [http], affinitySeconds: 300 },
    eps: { b: remote },
    ipvs: [`-A -t ${C1}:80 -s rr -p 300`, `-a -t ${C1}:80 -r ${P2}:8080 -m -w 1`],
    sets: [`add KPNG-CLUSTER-IP ${C1},tcp:80 -exist`],
    addresses: [`address replace ${C1}/32 ${dev}`],
  },
  {
    name: "ClientIP affinity without a timeout: upstream default 10800 s",
    svc: { name: "web", clusterIPs: [C1], ports: [http], affinitySeconds: 0 },
    eps: { b: remote },
    ipvs: [`-A -t ${C1}:80 -s rr -p 10800`, `-a -t ${C1}:80 -r ${P2}:8080 -m -w 1`],
    sets: [`add KPNG-CLUSTER-IP ${C1},tcp:80 -exist`],
    addresses: [`address replace ${C1}/32 ${dev}`],
  },
  {
    name: "UDP and SCTP ports: -u and --sctp-service virtual servers",
    svc: {
      name: "dns",
      clusterIPs: [C1],
      ports: [
        { name: "dns", protocol: "UDP", port: 53, targetPort: 5353 },
        { name: "sig", protocol: "SCTP", port: 9000 },
      ],
    },
    eps: { b: remote },
    ipvs: [
      `-A -u ${C1}:53 -s rr`,
      `-a -u ${C1}:53 -r ${P2}:5353 -m -w 1`,
      `-A --sctp-service ${C1}:9000 -s rr`,
      `-a --sctp-service ${C1}:9000 -r ${P2}:9000 -m -w 1`,
    ],
    sets: [`add KPNG-CLUSTER-IP ${C1},sctp:9000 -exist`, `add KPNG-CLUSTER-IP ${C1},udp:53 -exist`],
    addresses: [`address replace ${C1}/32 ${dev}`],
  },
  {
    name: "named target port: each endpoint's own port",
    svc: { name: "web", clusterIPs: [C1], ports: [{ name: "http", port: 80 }] },
    eps: { a: { ips: [P1], ports: { http: 8080 } }, b: { ips: [P2], ports: { http: 9090 } } },
    ipvs: [`-A -t ${C1}:80 -s rr`, `-a -t ${C1}:80 -r ${P1}:8080 -m -w 1`, `-a -t ${C1}:80 -r ${P2}:9090 -m -w 1`],
    sets: [`add KPNG-CLUSTER-IP ${C1},tcp:80 -exist`],
    addresses: [`address replace ${C1}/32 ${dev}`],
  },
  {
    name: "dual-stack: one virtual server per family, IPv6 bracketed, KPNG-6- sets",
    config: testConfig({ nodeIPs: [N1, N1v6], clusterCIDRs: [plan.v4.clusterCIDR, plan.v6.clusterCIDR] }),
    svc: { name: "web", clusterIPs: [C1, C1v6], ports: [http] },
    eps: { b: remote, b6: { ips: [P2v6] } },
    ipvs: [
      `-A -t ${C1}:80 -s rr`,
      `-a -t ${C1}:80 -r ${P2}:8080 -m -w 1`,
      `-A -t [${C1v6}]:80 -s rr`,
      `-a -t [${C1v6}]:80 -r [${P2v6}]:8080 -m -w 1`,
    ],
    sets: [`add KPNG-6-CLUSTER-IP ${C1v6},tcp:80 -exist`, `add KPNG-CLUSTER-IP ${C1},tcp:80 -exist`],
    addresses: [`address replace ${C1v6}/128 ${dev}`, `address replace ${C1}/32 ${dev}`],
  },
  {
    name: "scheduler comes from Config.ipvs.scheduler",
    config: testConfig({ ipvs: { scheduler: "sh", syncPeriodSeconds: 30, minSyncPeriodSeconds: 0 } }),
    svc: { name: "web", clusterIPs: [C1], ports: [http] },
    eps: { b: remote },
    ipvs: [`-A -t ${C1}:80 -s sh`, `-a -t ${C1}:80 -r ${P2}:8080 -m -w 1`],
    sets: [`add KPNG-CLUSTER-IP ${C1},tcp:80 -exist`],
    addresses: [`address replace ${C1}/32 ${dev}`],
  },
];

describe("ipvs golden first sync", () => {
  for (const c of cases) {
    test(c.name, async () => {
      const r = rig(c.config ?? testConfig());
      const eps = Object.fromEntries(Object.entries(c.eps).map(([k, e]) => [k, endpoint(e)]));
      const got = await applyAndRecord(r, nodeState(1, [entry(service(c.svc), eps)]), null);
      expect(got.ipvs).toEqual(c.ipvs);
      expect(got.sets).toEqual([...c.sets].sort());
      expect(got.addresses).toEqual([...c.addresses].sort());
    });
  }
});
