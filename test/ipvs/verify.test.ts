// `kpng verify` for IPVS (issue 36). This kernel has no IPVS, so a small
// fake kernel stands in for ipvsadm, ipset and the dummy interface's
// addresses: it applies what the backend runs (`ipvsadm -R`, `ipset
// restore`, `ip -batch`) and answers the reads (`ipvsadm -Sn`, `ipset save`,
// `ip -j addr`) from what it holds, and a test edits it by hand as an
// operator would. After syncs, full and partial, verify finds nothing; each
// hand edit is named by Service and frontend.

import { describe, expect, test } from "bun:test";
import { createIpvsBackend } from "../../plugins/ipvs/backend.ts";
import { memoryLogger } from "../../src/core/log.ts";
import type { Executor } from "../../src/host/backend.ts";
import { driftMetrics, hasDrift } from "../fixtures/drift-metrics.ts";
import { v4 } from "../fixtures/addresses.ts";
import { N1, lines, testConfig } from "./harness.ts";
import { endpoint, entry, nextState, nodeState, service } from "./services.ts";

/** IPVS, ipset and kube-ipvs0's addresses as plain data, driven by the commands the backend runs */
function fakeKernel() {
  /** "-t IP:PORT" -> its `-A` line and real servers ("IP:PORT" -> `-a` line) */
  const ipvs = new Map<string, { line: string; reals: Map<string, string> }>();
  const entries = new Set<string>();
  const addresses = new Set<string>();
  const applyIpvs = (l: string) => {
    const t = l.split(" ");
    const svc = `${t[1]} ${t[2]}`;
    const real = t[t.indexOf("-r") + 1];
    if (t[0] === "-A" || t[0] === "-E") ipvs.set(svc, { line: `-A ${l.slice(3)}`, reals: ipvs.get(svc)?.reals ?? new Map() });
    else if (t[0] === "-D") ipvs.delete(svc);
    else if (t[0] === "-a" || t[0] === "-e") ipvs.get(svc)?.reals.set(real, `-a ${l.slice(3)}`);
    else if (t[0] === "-d") ipvs.get(svc)?.reals.delete(real);
  };
  const exec: Executor = {
    async run(argv, stdin = "") {
      const cmd = argv.join(" ");
      if (cmd === "ipvsadm -Sn") return [...ipvs.values()].flatMap((v) => [v.line, ...v.reals.values()]).join("\n");
      if (cmd === "ipvsadm -R") for (const l of lines(stdin)) applyIpvs(l);
      if (cmd === "ipset save") return [...entries].map((e) => `add ${e}`).join("\n");
      if (cmd === "ipset restore")
        for (const l of lines(stdin)) {
          const m = /^(add|del) (\S+) (\S+)/.exec(l);
          if (m) m[1] === "add" ? entries.add(`${m[2]} ${m[3]}`) : entries.delete(`${m[2]} ${m[3]}`);
        }
      if (cmd === "ip -batch -")
        for (const l of lines(stdin)) {
          const m = /^address (replace|del) ([^/]+)\//.exec(l);
          if (m) m[1] === "replace" ? addresses.add(m[2]) : addresses.delete(m[2]);
        }
      if (cmd === "ip -j addr show dev kube-ipvs0")
        return JSON.stringify([{ ifname: "kube-ipvs0", addr_info: [...addresses].map((local) => ({ local, scope: "global" })) }]);
      return argv[0] === "ip" && argv[1] === "-j" ? "[]" : "";
    },
  };
  return { exec, ipvs, entries, addresses };
}

function rig() {
  const kernel = fakeKernel();
  const { metrics, drift } = driftMetrics();
  const backend = createIpvsBackend(
    { config: testConfig(), log: memoryLogger(), out: () => {}, metrics },
    { executor: kernel.exec, drainIntervalMs: 0 },
  );
  return { kernel, backend, drift };
}

const web = (...pods: number[]) =>
  entry(
    service({ name: "web", clusterIPs: [v4.clusterIP(1)], ports: [{ port: 80, targetPort: 8080, nodePort: 30080 }] }),
    Object.fromEntries(pods.map((i) => [`p${i}`, endpoint({ ips: [v4.pod(2, i)] })])),
  );
const dns = entry(service({ name: "dns", clusterIPs: [v4.clusterIP(2)], ports: [{ protocol: "UDP", port: 53, targetPort: 5353 }] }), {
  p: endpoint({ ips: [v4.pod(2, 9)] }),
});

async function programmed() {
  const r = rig();
  const state = nodeState(1, [web(1, 2), dns]);
  await r.backend.apply(state, null);
  return { ...r, state };
}

describe("ipvs verify: the kernel read back (fake kernel)", () => {
  test("after a full sync and a partial one (an endpoint draining at weight 0): no difference, the metric says 0", async () => {
    const { backend, state, drift, kernel } = await programmed();
    expect(await backend.verify()).toEqual([]);
    await backend.apply(nextState(state, { "default/web": web(1)[1] }), new Set(["default/web"]));
    // the gone TCP endpoint drains: still in the kernel at weight 0, kpng's own doing
    expect(kernel.ipvs.get(`-t ${v4.clusterIP(1)}:80`)!.reals.get(`${v4.pod(2, 2)}:8080`)).toContain("-w 0");
    expect(await backend.verify()).toEqual([]);
    expect(drift).toEqual([
      { backend: "ipvs", differences: 0 },
      { backend: "ipvs", differences: 0 },
    ]);
  });

  test("a virtual server deleted by hand: the Service and its frontend named as missing; narrowed to another Service: none", async () => {
    const { backend, kernel, drift } = await programmed();
    kernel.ipvs.delete(`-t ${v4.clusterIP(1)}:80`);
    const drifts = await backend.verify();
    expect(drifts).toEqual([expect.objectContaining({ service: "default/web", frontend: `${v4.clusterIP(1)}:80/TCP`, kind: "missing" })]);
    expect(drifts[0].detail).toContain("virtual server");
    expect(drift).toEqual([{ backend: "ipvs", differences: 1 }]);
    expect(await backend.verify("default/dns")).toEqual([]);
  });

  test("a real server deleted, another's weight changed, the node port's: each named with its frontend", async () => {
    const { backend, kernel } = await programmed();
    kernel.ipvs.get(`-u ${v4.clusterIP(2)}:53`)!.reals.clear();
    const np = kernel.ipvs.get(`-t ${N1}:30080`)!;
    np.reals.set(`${v4.pod(2, 1)}:8080`, `-a -t ${N1}:30080 -r ${v4.pod(2, 1)}:8080 -m -w 5`);
    const drifts = await backend.verify();
    hasDrift(drifts, { service: "default/dns", frontend: `${v4.clusterIP(2)}:53/UDP`, kind: "missing" });
    hasDrift(drifts, { service: "default/web", frontend: `${N1}:30080/TCP`, kind: "differs" });
    expect(drifts).toHaveLength(2);
  });

  test("an address taken off kube-ipvs0, a set entry removed, a virtual server added on a kpng address: named", async () => {
    const { backend, kernel } = await programmed();
    kernel.addresses.delete(v4.clusterIP(2));
    const entry = [...kernel.entries].find((e) => e.includes(`${v4.clusterIP(1)},tcp:80`))!;
    kernel.entries.delete(entry);
    kernel.ipvs.set(`-t ${v4.clusterIP(1)}:81`, { line: `-A -t ${v4.clusterIP(1)}:81 -s rr`, reals: new Map() });
    const drifts = await backend.verify();
    hasDrift(drifts, { service: "default/dns", frontend: v4.clusterIP(2), kind: "missing" });
    hasDrift(drifts, { service: "default/web", kind: "missing", detail: `ipset entry ${entry}` });
    hasDrift(drifts, { service: "", frontend: `${v4.clusterIP(1)}:81/TCP`, kind: "extra" });
    expect(drifts).toHaveLength(3);
  });
});
