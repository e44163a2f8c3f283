// Graceful removal of real servers: weight 0 while connections drain, then
// delete (upstream pkg/proxy/ipvs/graceful_termination.go).

import { describe, expect, test } from "bun:test";
import { v4 } from "../fixtures/addresses.ts";
import { applyAndRecord, rig } from "./harness.ts";
import { type ProtoName, endpoint, entry, nodeState, nextState, service } from "./services.ts";

const C1 = v4.clusterIP(1);
const P = (i: number) => v4.pod(2, i);

const svc = (protocol: ProtoName, pods: number[]) =>
  entry(
    service({ name: "web", clusterIPs: [C1], ports: [{ name: "p", protocol, port: 80, targetPort: 8080 }] }),
    Object.fromEntries(pods.map((p) => [`p${p}`, endpoint({ ips: [P(p)] })])),
  );

/** `ipvsadm -Ln --exact -t ...` output with the given active/inactive counts for pod 2. */
const listing = (active: number, inactive: number) =>
  [
    "IP Virtual Server version 1.2.1 (size=4096)",
    "Prot LocalAddress:Port Scheduler Flags",
    "  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn",
    `TCP  ${C1}:80 rr`,
    `  -> ${P(1)}:8080              Masq    1      7          1`,
    `  -> ${P(2)}:8080              Masq    0      ${active}          ${inactive}`,
  ].join("\n");

async function drainingRig() {
  let conns = { active: 2, inactive: 1 };
  const r = rig(undefined, {
    answer: (argv) => (argv[1] === "-Ln" && argv.includes("--exact") ? listing(conns.active, conns.inactive) : undefined),
  });
  const s1 = nodeState(1, [svc("TCP", [1, 2])]);
  await r.backend.apply(s1, null);
  const s2 = nextState(s1, Object.fromEntries([svc("TCP", [1])]));
  const removed = await applyAndRecord(r, s2, new Set(["default/web"]));
  return { r, s2, removed, setConns: (a: number, i: number) => (conns = { active: a, inactive: i }) };
}

describe("ipvs graceful termination", () => {
  test("TCP real server removed: weight 0 first, deleted only when its connections are over", async () => {
    const { r, removed, setConns } = await drainingRig();
    expect(removed.ipvs).toEqual([`-e -t ${C1}:80 -r ${P(2)}:8080 -m -w 0`]);

    r.rec.clear();
    expect(await r.backend.drain()).toBe(0); // 2 active + 1 inactive: keep
    expect(r.rec.find("ipvsadm", "-Ln", "--exact", "-t", `${C1}:80`)).toHaveLength(1);
    expect(r.rec.find("ipvsadm", "-R")).toEqual([]);

    setConns(0, 0);
    r.rec.clear();
    expect(await r.backend.drain()).toBe(1);
    expect(r.rec.input("ipvsadm", "-R")).toBe(`-d -t ${C1}:80 -r ${P(2)}:8080\n`);

    r.rec.clear();
    expect(await r.backend.drain()).toBe(0); // nothing left to drain: no listing either
    expect(r.rec.commands).toEqual([]);
  });

  test("inactive connections still count: not deleted while InActConn > 0", async () => {
    const { r, setConns } = await drainingRig();
    setConns(0, 4);
    expect(await r.backend.drain()).toBe(0);
  });

  test("UDP and SCTP real servers removed: deleted at once", async () => {
    for (const proto of ["UDP", "SCTP"] as const) {
      const r = rig();
      const s1 = nodeState(1, [svc(proto, [1, 2])]);
      await r.backend.apply(s1, null);
      const got = await applyAndRecord(r, nextState(s1, Object.fromEntries([svc(proto, [1])])), new Set(["default/web"]));
      const flag = proto === "UDP" ? "-u" : "--sctp-service";
      expect(got.ipvs).toEqual([`-d ${flag} ${C1}:80 -r ${P(2)}:8080`]);
    }
  });

  test("draining real server comes back: weight restored, not re-added", async () => {
    const { r, s2 } = await drainingRig();
    const got = await applyAndRecord(r, nextState(s2, Object.fromEntries([svc("TCP", [1, 2])])), new Set(["default/web"]));
    expect(got.ipvs).toEqual([`-e -t ${C1}:80 -r ${P(2)}:8080 -m -w 1`]);
    r.rec.clear();
    expect(await r.backend.drain()).toBe(0);
    expect(r.rec.commands).toEqual([]);
  });

  test("service deleted while draining: virtual server deleted at once, nothing left to drain", async () => {
    const { r, s2 } = await drainingRig();
    const got = await applyAndRecord(r, nextState(s2, { "default/web": undefined }), new Set(["default/web"]));
    expect(got.ipvs).toEqual([`-D -t ${C1}:80`]);
    r.rec.clear();
    expect(await r.backend.drain()).toBe(0);
    expect(r.rec.commands).toEqual([]);
  });

  test("after a restart, a weight-0 real server found in the kernel keeps draining", async () => {
    const save = `-A -t ${C1}:80 -s rr\n-a -t ${C1}:80 -r ${P(1)}:8080 -m -w 1\n-a -t ${C1}:80 -r ${P(2)}:8080 -m -w 0\n`;
    const r = rig(undefined, { answer: (argv) => (argv.join(" ") === "ipvsadm -Sn" ? save : undefined) });
    const got = await applyAndRecord(r, nodeState(1, [svc("TCP", [1])]), null);
    expect(got.ipvs).toEqual([]);
    // the listing now says the real server is gone from the kernel's stats: delete it
    expect(await r.backend.drain()).toBe(1);
  });
});
