// Partial syncs: only what changed is sent, with the arithmetic in comments.

import { describe, expect, test } from "bun:test";
import type { ServiceEndpoints } from "../../src/core/brain/state.ts";
import { v4 } from "../fixtures/addresses.ts";
import { N1, applyAndRecord, lines, rig } from "./harness.ts";
import { type ServiceSpec, endpoint, entry, nodeState, nextState, service } from "./services.ts";

const C = (i: number) => v4.clusterIP(i);
const P = (i: number) => v4.pod(2, i);
const E1 = v4.external(1);

// Each web-i service: cluster IP + node port = 2 virtual servers.
const webSpec = (i: number, extra: Partial<ServiceSpec> = {}): ServiceSpec => ({
  name: `web-${i}`,
  clusterIPs: [C(i)],
  ports: [{ name: "http", port: 80, targetPort: 8080, nodePort: 30000 + i }],
  ...extra,
});
const web = (i: number, pods: number[], extra: Partial<ServiceSpec> = {}): [string, ServiceEndpoints] =>
  entry(service(webSpec(i, extra)), Object.fromEntries(pods.map((p) => [`p${p}`, endpoint({ ips: [P(p)] })])));

async function primed(services = 3) {
  const r = rig();
  const entries = Array.from({ length: services }, (_, i) => web(i + 1, [1, 2]));
  const state = nodeState(1, entries);
  await r.backend.apply(state, null);
  return { r, state };
}

describe("ipvs partial sync", () => {
  test("unchanged services in a change set: no operation, no command", async () => {
    const { r, state } = await primed();
    const next = nextState(state, {});
    r.rec.clear();
    await r.backend.apply(next, new Set(["default/web-1", "default/web-2"]));
    expect(r.backend.last.operations).toBe(0);
    expect(r.rec.commands).toEqual([]);
  });

  test("one endpoint added: one real server per virtual server of its scopes", async () => {
    const { r, state } = await primed();
    const got = await applyAndRecord(r, nextState(state, Object.fromEntries([web(2, [1, 2, 3])])), new Set(["default/web-2"]));
    // 2 virtual servers (cluster IP, node port) x 1 new real = 2 ops, in 1 command
    expect(got.ipvs).toEqual([`-a -t ${C(2)}:80 -r ${P(3)}:8080 -m -w 1`, `-a -t ${N1}:30002 -r ${P(3)}:8080 -m -w 1`]);
    expect(got.sets).toEqual([]);
    expect(got.addresses).toEqual([]);
    expect(r.backend.last).toEqual({ full: false, operations: 2, commands: 1 });
  });

  // 200 services: a pass over them all would be hundreds of operations (1,000 cost 5 times the CPU)
  test("one endpoint change costs the same with 200 services as with 3", async () => {
    const { r, state } = await primed(200);
    await applyAndRecord(r, nextState(state, Object.fromEntries([web(100, [1, 2, 3])])), new Set(["default/web-100"]));
    expect(r.backend.last.operations).toBe(2); // 2 virtual servers x 1 added real
  });

  test("one TCP endpoint removed: weight 0 per virtual server (graceful), nothing deleted yet", async () => {
    const { r, state } = await primed();
    const got = await applyAndRecord(r, nextState(state, Object.fromEntries([web(2, [1])])), new Set(["default/web-2"]));
    expect(got.ipvs).toEqual([`-e -t ${C(2)}:80 -r ${P(2)}:8080 -m -w 0`, `-e -t ${N1}:30002 -r ${P(2)}:8080 -m -w 0`]);
  });

  test("last endpoint removed: both destinations REJECTed, reals drained", async () => {
    const { r, state } = await primed();
    const got = await applyAndRecord(r, nextState(state, Object.fromEntries([web(2, [])])), new Set(["default/web-2"]));
    // 2 reals x 2 virtual servers set to weight 0 + 2 REJECT entries = 6
    expect(r.backend.last.operations).toBe(6);
    expect(got.sets).toEqual([`add KPNG-REJECT ${N1},tcp:30002 -exist`, `add KPNG-REJECT ${C(2)},tcp:80 -exist`].sort());
  });

  test("service removed: virtual servers deleted, address unbound, entries removed", async () => {
    const { r, state } = await primed();
    const got = await applyAndRecord(r, nextState(state, { "default/web-2": undefined }), new Set(["default/web-2"]));
    // 2 virtual servers + 1 address + 2 set entries (CLUSTER-IP, NODE-PORT) = 5
    expect(got.ipvs).toEqual([`-D -t ${C(2)}:80`, `-D -t ${N1}:30002`]);
    expect(got.addresses).toEqual([`address del ${C(2)}/32 dev kube-ipvs0`]);
    expect(got.sets).toEqual([`del KPNG-CLUSTER-IP ${C(2)},tcp:80 -exist`, `del KPNG-NODE-PORT ${N1},tcp:30002 -exist`]);
    expect(r.backend.last.operations).toBe(5);
  });

  test("affinity turned on: one edit per virtual server, reals untouched", async () => {
    const { r, state } = await primed();
    const got = await applyAndRecord(
      r,
      nextState(state, Object.fromEntries([web(2, [1, 2], { affinitySeconds: 60 })])),
      new Set(["default/web-2"]),
    );
    expect(got.ipvs).toEqual([`-E -t ${C(2)}:80 -s rr -p 60`, `-E -t ${N1}:30002 -s rr -p 60`]);
  });

  test("an external IP shared by two services stays bound while one of them remains", async () => {
    const r = rig();
    const a = web(1, [1], { externalIPs: [E1] });
    const b = entry(service({ name: "other", clusterIPs: [C(9)], externalIPs: [E1], ports: [{ port: 443 }] }), {
      p: endpoint({ ips: [P(1)] }),
    });
    const state = nodeState(1, [a, b]);
    await r.backend.apply(state, null);
    const got = await applyAndRecord(r, nextState(state, { "default/web-1": undefined }), new Set(["default/web-1"]));
    expect(got.addresses).toEqual([`address del ${C(1)}/32 dev kube-ipvs0`]);
  });
});

describe("ipvs full sync", () => {
  test("restart with the kernel already right: re-read, no ipvs or address operation", async () => {
    const { r: first, state } = await primed(2);
    // What the first run left in the kernel, as the tools print it back.
    const save = first.rec.input("ipvsadm", "-R");
    const ipset = first.rec
      .input("ipset", "restore")
      .split("\n")
      .filter((l) => l.startsWith("add "))
      .map((l) => l.replace(/ -exist$/, ""))
      .join("\n");
    const addrs = JSON.stringify([{ ifname: "kube-ipvs0", addr_info: [C(1), C(2)].map((local) => ({ local, scope: "global" })) }]);
    const answers: Record<string, string> = { "ipvsadm -Sn": save, "ipset save": ipset, "ip -j addr show dev kube-ipvs0": addrs };
    const r = rig(undefined, { answer: (argv) => answers[argv.join(" ")] });
    await r.backend.apply(state, null);
    expect(r.backend.last).toMatchObject({ full: true, operations: 0 });
    expect(r.rec.find("ipvsadm", "-R")).toEqual([]);
    expect(r.rec.find("ip", "-batch", "-")).toEqual([]);
  });

  test("a virtual server and an address left by an earlier run are removed", async () => {
    const stale = C(77);
    const answers: Record<string, string> = {
      "ipvsadm -Sn": `-A -t ${stale}:80 -s rr\n-a -t ${stale}:80 -r ${P(9)}:8080 -m -w 1\n`,
      "ipset save": `add KPNG-CLUSTER-IP ${stale},tcp:80\nadd SOMEONE-ELSE ${stale},tcp:80\n`,
      "ip -j addr show dev kube-ipvs0": JSON.stringify([{ ifname: "kube-ipvs0", addr_info: [{ local: stale, scope: "global" }] }]),
    };
    const r = rig(undefined, { answer: (argv) => answers[argv.join(" ")] });
    const got = await applyAndRecord(r, nodeState(1, []), null);
    expect(got.ipvs).toEqual([`-D -t ${stale}:80`]);
    expect(got.addresses).toEqual([`address del ${stale}/32 dev kube-ipvs0`]);
    // only our sets are touched
    expect(got.sets).toEqual([`del KPNG-CLUSTER-IP ${stale},tcp:80 -exist`]);
  });

  test("a virtual server kpng cannot prove its own (not on kube-ipvs0, in none of its sets) is left alone", async () => {
    // keepalived's, on the node's own address; and a stale one of kpng's beside it
    const foreign = `-A -t ${N1}:8443 -s rr\n-a -t ${N1}:8443 -r ${P(9)}:8443 -m -w 0\n`;
    const stale = C(77);
    const answers: Record<string, string> = {
      "ipvsadm -Sn": `${foreign}-A -t ${stale}:80 -s rr\n`,
      "ipset save": `add KPNG-CLUSTER-IP ${stale},tcp:80\n`,
      "ip -j addr show dev kube-ipvs0": JSON.stringify([{ ifname: "kube-ipvs0", addr_info: [{ local: stale, scope: "global" }] }]),
    };
    const r = rig(undefined, { answer: (argv) => answers[argv.join(" ")] });
    const got = await applyAndRecord(r, nodeState(1, []), null);
    expect(got.ipvs).toEqual([`-D -t ${stale}:80`]);
    // its draining (weight 0) real server is not kpng's to finish either
    r.rec.clear();
    await r.backend.apply(nodeState(1, []), new Set());
    expect(r.rec.input("ipvsadm", "-R")).not.toContain(N1);
  });

  test("--cleanup deletes kpng's virtual servers only, and kube-ipvs0 only if it is a dummy device", async () => {
    const answers: Record<string, string> = {
      "ipvsadm -Sn": `-A -t ${N1}:8443 -s rr\n-A -t ${C(5)}:80 -s rr\n-A -t ${N1}:30080 -s rr\n`,
      "ipset save": `add KPNG-NODE-PORT ${N1},tcp:30080\n`,
      "ip -j addr show dev kube-ipvs0": JSON.stringify([{ ifname: "kube-ipvs0", addr_info: [{ local: C(5), scope: "global" }] }]),
    };
    for (const [kind, deleted] of [
      ["dummy", true],
      ["veth", false],
    ] as const) {
      const link = JSON.stringify([{ ifname: "kube-ipvs0", linkinfo: { info_kind: kind } }]);
      const r = rig(undefined, { answer: (argv) => (argv.join(" ") === "ip -j -d link show kube-ipvs0" ? link : answers[argv.join(" ")]) });
      await r.backend.cleanup();
      expect(r.rec.find("ipvsadm", "-C")).toEqual([]);
      expect(lines(r.rec.input("ipvsadm", "-R")).sort()).toEqual([`-D -t ${C(5)}:80`, `-D -t ${N1}:30080`]);
      expect(r.rec.find("ip", "link", "del", "kube-ipvs0").length).toBe(deleted ? 1 : 0);
    }
  });

  test("a failed apply forces the next sync to be full (kernel re-read)", async () => {
    let failing = true;
    const r = rig(undefined, { fail: (argv) => failing && argv[0] === "ipvsadm" && argv[1] === "-R" });
    const state = nodeState(1, [web(1, [1])]);
    await r.backend.apply(state, null).catch(() => undefined);
    await expect(r.backend.apply(state, null)).rejects.toThrow("recorded failure");
    failing = false;
    r.rec.clear();
    await r.backend.apply(nextState(state, Object.fromEntries([web(1, [1, 2])])), new Set(["default/web-1"]));
    expect(r.backend.last.full).toBe(true);
    expect(r.rec.find("ipvsadm", "-Sn")).toHaveLength(1);
  });

  test("full sync writes sets, iptables rules and missing jumps; partial syncs do not", async () => {
    const r = rig(undefined, { fail: (argv) => argv.includes("-C") });
    const state = nodeState(1, [web(1, [1])]);
    await r.backend.apply(state, null);
    expect(r.rec.find("iptables-restore")).toHaveLength(1);
    expect(r.rec.find("iptables", "-w", "-t", "nat", "-I")).toHaveLength(3); // PREROUTING, OUTPUT, POSTROUTING
    expect(r.rec.find("iptables", "-w", "-t", "filter", "-I")).toHaveLength(2); // INPUT, FORWARD
    r.rec.clear();
    await r.backend.apply(nextState(state, Object.fromEntries([web(1, [1, 2])])), new Set(["default/web-1"]));
    expect(r.rec.commands.map((c) => c.argv.join(" "))).toEqual(["ipvsadm -R"]);
  });
});
