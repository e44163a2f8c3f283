// The backend as the CLI loads it: deprecation warning, dry-run, config
// checks, node port addresses.

import { describe, expect, test } from "bun:test";
import { isInvalidArgument } from "../../src/core/errors.ts";
import { memoryLogger } from "../../src/core/log.ts";
import type { FullStateBackend } from "../../src/host/backend.ts";
import factory, { IPVS_DEPRECATION_MESSAGE, IPVS_DEPRECATION_REASON } from "../../plugins/ipvs/index.ts";
import { nodePortIPs } from "../../src/host/toolkit/index.ts";
import { plan, v4, v6 } from "../fixtures/addresses.ts";
import { N1, N1v6, lines, rig, testConfig } from "./harness.ts";
import { endpoint, entry, nodeState, service } from "./services.ts";

const web = entry(service({ name: "web", clusterIPs: [v4.clusterIP(1)], ports: [{ port: 80, targetPort: 8080, nodePort: 30080 }] }), {
  a: endpoint({ ips: [v4.pod(2, 1)] }),
});

describe("ipvs backend", () => {
  test("the deprecation message is upstream's, exported for the CLI's Node Warning event", () => {
    expect(IPVS_DEPRECATION_MESSAGE).toBe(
      "The ipvs proxier is now deprecated and may be removed in a future release. Please use 'nftables' instead.",
    );
    expect(IPVS_DEPRECATION_REASON).toBe("IPVSDeprecation");
  });

  test("dry-run: setup warns, then every operation is printed and the kernel is never read", async () => {
    const out: string[] = [];
    const log = memoryLogger();
    const ctx = { config: testConfig({ dryRun: true }), log, out: (t: string) => out.push(t) };
    const backend = (await factory(ctx)) as FullStateBackend;
    expect(backend.kind).toBe("full");
    await backend.setup!(ctx);
    await backend.apply(nodeState(1, [web]), null);
    const text = out.join("");
    expect(log.lines.filter((l) => l.includes(IPVS_DEPRECATION_MESSAGE))).toHaveLength(1);
    expect(text).toContain(`# ipvsadm -R\n-A -t ${v4.clusterIP(1)}:80 -s rr\n`);
    expect(text).toContain(`add KPNG-CLUSTER-IP ${v4.clusterIP(1)},tcp:80 -exist`);
    expect(text).toContain("# iptables-restore -w --noflush\n*nat\n");
    expect(text).toContain("# iptables -w -t nat -I PREROUTING");
    expect(text).toContain(`address replace ${v4.clusterIP(1)}/32 dev kube-ipvs0`);
    expect(text).not.toContain("ipvsadm -Sn");
    expect(text).not.toContain("ipset save");
  });

  test("an unknown scheduler is refused up front, naming the field", () => {
    const err = (() => {
      try {
        rig(testConfig({ ipvs: { scheduler: "fastest", syncPeriodSeconds: 30, minSyncPeriodSeconds: 0 } }));
      } catch (e) {
        return e;
      }
    })();
    expect(isInvalidArgument(err)).toBe(true);
    expect(String(err)).toContain("ipvs.scheduler");
  });

  test("setup probes IPVS, sets the sysctls and creates kube-ipvs0 only when missing", async () => {
    const r = rig(testConfig(), { fail: (argv) => argv.join(" ") === "ip link show kube-ipvs0" });
    await r.backend.setup();
    expect(r.rec.commands.map((c) => c.argv.join(" "))).toEqual([
      "ipvsadm -Ln --timeout",
      "sysctl -w net.ipv4.vs.conntrack=1 net.ipv4.vs.expire_nodest_conn=1 net.ipv4.vs.expire_quiescent_template=1 net.ipv4.ip_forward=1",
      "ip link show kube-ipvs0",
      "ip link add kube-ipvs0 type dummy",
    ]);
  });

  test("nodePortAddresses CIDR: node ports only on the interface addresses inside it", async () => {
    const other = v4.client(7); // an interface address outside the node CIDR
    const config = testConfig({ nodePortAddresses: [plan.v4.nodeCIDR] });
    const ipAddr = JSON.stringify([
      {
        ifname: "eth0",
        addr_info: [
          { local: N1, scope: "global" },
          { local: "fe80::1", scope: "link" },
        ],
      },
      { ifname: "eth1", addr_info: [{ local: other, scope: "global" }] },
      { ifname: "kube-ipvs0", addr_info: [{ local: v4.node(9), scope: "global" }] },
    ]);
    const r = rig(config, { answer: (argv) => (argv.join(" ") === "ip -j addr show" ? ipAddr : undefined) });
    await r.backend.setup();
    r.rec.clear();
    await r.backend.apply(nodeState(1, [web]), null);
    const vs = lines(r.rec.input("ipvsadm", "-R")).filter((l) => l.startsWith("-A"));
    expect(vs).toEqual([`-A -t ${v4.clusterIP(1)}:80 -s rr`, `-A -t ${N1}:30080 -s rr`]);
  });
});

describe("node port addresses", () => {
  const cases = [
    { name: "empty nodePortAddresses: the node IPs", npa: [], want: [N1, N1v6] },
    { name: '"primary": the node IPs', npa: ["primary"], want: [N1, N1v6] },
    { name: "a CIDR per family: the interface addresses inside", npa: [plan.v4.nodeCIDR, plan.v6.nodeCIDR], want: [N1, v6.node(2)] },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const ifaces = [N1, v4.client(1), v6.node(2), v6.client(3)];
      expect(nodePortIPs({ nodeIPs: [N1, N1v6], nodePortAddresses: c.npa }, ifaces)).toEqual(c.want);
    });
  }
});
