// Partial restores, asserted on the restore input a recorder captured: after
// the first full restore only the chains of changed services are named, and
// a replay of identical calls (a brain restart in sidecar mode) names nothing.

import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { recordingExecutor, restoredMarker } from "../../plugins/iptables/executor.ts";
import type { BackendContext } from "../../src/host/backend.ts";
import type { StdinChunk } from "../../src/host/toolkit/index.ts";
import { IptablesBackend } from "../../plugins/iptables/index.ts";
import { serviceChain, servicePortId } from "../../plugins/iptables/names.ts";
import { waitFor } from "../sources/kube/helpers.ts";
import { LOADED_WAIT_MS } from "../harness/kpng-process.ts";
import { ep, svc, testConfig, testContext, v4 } from "./fixtures.ts";

// waits are bounded by their condition, up to LOADED_WAIT_MS each (issue 38: no test may depend
// on an idle machine): a test's own timeout leaves room for two
setDefaultTimeout(150_000);

const web = (i: number, extra: Partial<Parameters<typeof svc>[0]> = {}) =>
  svc({ name: `web${i}`, clusterIPs: [v4.clusterIP(i)], ports: [{ name: "http", port: 80 }], ...extra });
const pod = (i: number) => ep({ ips: [v4.pod(i >> 8, i & 255)], ports: { http: 8080 } });
const member = (i: number) => `${v4.pod(i >> 8, i & 255)},6:8080,${v4.pod(i >> 8, i & 255)}`;

/** A backend (IPv4 only: the arithmetic below counts one family) holding `n` services of `eps` endpoints each, after its full restore. */
async function loaded(n: number, eps = 2, opts: { hairpinSet?: boolean } = {}) {
  const rec = recordingExecutor();
  const b = new IptablesBackend(testContext(testConfig()), {
    executor: rec,
    families: ["v4"],
    monitorPeriodMs: 0,
    hairpinSet: opts.hairpinSet,
  });
  for (let i = 1; i <= n; i++) {
    b.setService(web(i));
    for (let e = 0; e < eps; e++) b.setEndpoint("default", `web${i}`, `p${e}`, pod(i * 8 + e));
  }
  await b.sync();
  expect(b.lastSync?.full).toBe(true);
  rec.calls.length = 0;
  return { b, rec };
}

/**
 * As `loaded`, with an executor that streams restores (recording each chunk
 * as iptables-restore would read it, a promised one once it resolves) and
 * holds every ipset input starting with `held` until the test releases it.
 */
async function heldIpset(n: number, held: string) {
  const rec = recordingExecutor();
  const chunks: string[] = [];
  const failures: boolean[] = [];
  let gate = Promise.withResolvers<void>();
  const release = {
    ok: () => gate.resolve(),
    fail: (err: Error) => gate.reject(err),
    reset: () => {
      gate = Promise.withResolvers<void>();
      gate.resolve();
    },
  };
  let holding = false;
  const exec = Object.assign(
    {
      async run(argv: string[], stdin?: string) {
        if (holding && argv[0] === "ipset" && stdin?.startsWith(held)) await gate.promise;
        return rec.run(argv, stdin);
      },
      async stream(argv: string[], input: Iterable<StdinChunk>) {
        const got: string[] = [];
        for (const c of input) {
          got.push(typeof c === "string" ? c : await c);
          if (holding) chunks.push(got.at(-1)!);
        }
        return rec.run(argv, got.join(""));
      },
    },
    { restores: rec.restores },
  );
  const ctx = testContext(testConfig());
  const metrics = { transactionFailed: () => failures.push(true), iptablesRules: () => {}, conntrackReconciled: () => {} };
  const b = new IptablesBackend(
    { ...ctx, metrics: metrics as unknown as BackendContext["metrics"] },
    {
      executor: exec,
      families: ["v4"],
      monitorPeriodMs: 0,
    },
  );
  for (let i = 1; i <= n; i++) {
    b.setService(web(i));
    for (let e = 0; e < 2; e++) b.setEndpoint("default", `web${i}`, `p${e}`, pod(i * 8 + e));
  }
  await b.sync();
  holding = true;
  return { b, exec, chunks, release, failures };
}

const lines = (text: string, re: RegExp) => text.split("\n").filter((l) => re.test(l));
const chainsNamed = (text: string) => new Set([...text.matchAll(/KPNG-[A-Z]+-[A-Z2-7]{16}/g)].map((m) => m[0]));
const ownChains = (name: string) =>
  ["cluster", "local", "external", "ext", "firewall"].map((k) => serviceChain(k as "cluster", servicePortId("default", name, "tcp", 80)));
/** every call in order: "ipset" or "iptables-restore", with its input lines */
const sequence = (rec: ReturnType<typeof recordingExecutor>) =>
  rec.calls.map((c) => ({ argv0: c.argv[0], lines: (c.stdin ?? "").trim().split("\n") }));

describe("iptables partial restores", () => {
  test("one endpoint added: only that service's SVC chain is written; its hairpin member added before the restore", async () => {
    const { b, rec } = await loaded(50);
    b.setEndpoint("default", "web7", "p2", pod(7 * 8 + 2));
    await b.sync();
    const [text] = rec.restores("v4");
    expect(b.lastSync?.full).toBe(false);
    // 1 chain declared (SVC rewritten); rules: 1 masquerade + 3 balance (each DNATs, no SEP chain) = 4.
    expect(lines(text, /^:/)).toEqual([`:${ownChains("web7")[0]} - [0:0]`]);
    expect(lines(text, /^-A /).length).toBe(4);
    expect(lines(text, / -j DNAT /).length).toBe(3);
    expect(lines(text, /^-[DIX] /)).toEqual([]);
    expect([...chainsNamed(text)]).toEqual([ownChains("web7")[0]]);
    expect(sequence(rec).map((c) => c.argv0)).toEqual(["ipset", "iptables-restore"]);
    expect(sequence(rec)[0].lines).toEqual([`add KPNG-HAIRPIN-V4 ${member(7 * 8 + 2)} -exist`]);
  });

  test("a change's restore is done at its marker; a full sync's at the program's exit (start-up's collection follows the first)", async () => {
    const rec = recordingExecutor();
    const b = new IptablesBackend(testContext(testConfig()), { executor: rec, families: ["v4"], monitorPeriodMs: 0 });
    b.setService(web(1));
    b.setEndpoint("default", "web1", "p0", pod(8));
    const restores = () => rec.calls.filter((c) => c.argv[0].endsWith("-restore")).map((c) => c.doneAt);
    await b.sync();
    expect(b.lastSync?.full).toBe(true);
    expect(restores()).toEqual([undefined]);
    rec.calls.length = 0;
    b.setEndpoint("default", "web1", "p1", pod(9));
    await b.sync();
    expect(b.lastSync?.full).toBe(false);
    expect(restores()).toEqual([restoredMarker]);
  });

  test("the restore starts beside the new hairpin member, and writes its first COMMIT only once the member is in", async () => {
    const { b, exec, chunks, release } = await heldIpset(50, "add ");
    b.setEndpoint("default", "web7", "p2", pod(7 * 8 + 2));
    const syncing = b.sync();
    await waitFor("the restore to start", () => chunks.length > 0, LOADED_WAIT_MS);
    expect(chunks.join("")).toStartWith(`*nat\n:${ownChains("web7")[0]} - [0:0]\n`);
    expect(chunks.join("")).not.toContain("COMMIT");
    release.ok();
    await syncing;
    // what iptables-restore read: the partial restore, then the marker it echoes when done (executor.ts)
    expect(chunks.join("")).toBe(`${exec.restores("v4").at(-1)}${restoredMarker}\n`);
    expect(chunks.join("")).toContain("\nCOMMIT\n");
  });

  test("a hairpin member refused: the restore commits nothing, the sync fails (no restore failure counted) and the next one is full", async () => {
    const { b, chunks, release, failures } = await heldIpset(50, "add ");
    b.setEndpoint("default", "web7", "p2", pod(7 * 8 + 2));
    const syncing = b.sync();
    await waitFor("the restore to start", () => chunks.length > 0, LOADED_WAIT_MS);
    release.fail(new Error("ipset: add refused"));
    await expect(syncing).rejects.toThrow("ipset: add refused");
    expect(chunks.join("")).not.toContain("COMMIT");
    expect(failures).toEqual([]);
    release.reset();
    await b.sync();
    expect(b.lastSync?.full).toBe(true);
  });

  test("without ipset (upstream's layout): one endpoint added writes the SVC chain and the new SEP chain", async () => {
    const { b, rec } = await loaded(50, 2, { hairpinSet: false });
    b.setEndpoint("default", "web7", "p2", pod(7 * 8 + 2));
    await b.sync();
    const [text] = rec.restores("v4");
    // 2 chains declared (SVC rewritten, SEP new); rules: SVC = 1 masquerade + 3 balance, SEP = hairpin + DNAT -> 6.
    expect(lines(text, /^:/).length).toBe(2);
    expect(lines(text, /^-A /).length).toBe(6);
    expect(lines(text, /^-[DIX] /)).toEqual([]);
    const svcChain = ownChains("web7")[0];
    const seps = new Set(lines(text, new RegExp(`^-A ${svcChain} .* -j KPNG-SEP-`)).map((l) => l.split(" -j ")[1]));
    expect([...chainsNamed(text)].filter((c) => c !== svcChain && !seps.has(c))).toEqual([]);
    expect(rec.calls.map((c) => c.argv[0])).toEqual(["iptables-restore"]);
  });

  test("past 1,000 endpoints (upstream's large-cluster mode) no nat rule carries a comment (upstream: the per-endpoint ones); filter rules keep theirs", async () => {
    for (const [n, large] of [
      [100, false],
      [501, true],
    ] as const) {
      const { b, rec } = await loaded(n); // 2 endpoints each
      b.setEndpoint("default", "web7", "p2", pod(7 * 8 + 2));
      await b.sync();
      const text = rec.restores("v4")[0];
      const perEndpoint = lines(text, / -j DNAT /);
      expect(perEndpoint.length).toBe(3);
      expect(perEndpoint.filter((l) => l.includes("--comment")).length).toBe(large ? 0 : 3);
      expect(lines(text, / -j KPNG-MARK-MASQ$/).length).toBe(1);
      expect(lines(text, /cluster IP" .* -j KPNG-MARK-MASQ$/).length).toBe(large ? 0 : 1);
      // the last endpoint gone: the filter REJECT keeps its comment either way
      for (const key of ["p0", "p1", "p2"]) b.deleteEndpoint("default", "web7", key);
      await b.sync();
      const gone = rec.restores("v4")[1];
      expect(lines(gone, /^-A KPNG-SERVICES .*has no endpoints" .* -j REJECT$/).length).toBe(1);
      expect(lines(gone, /^-D KPNG-SERVICES .*--comment/).length).toBe(large ? 0 : 1);
    }
  });

  test("one endpoint removed: SVC rewritten; its hairpin member deleted after the restore", async () => {
    const { b, rec } = await loaded(50, 3);
    b.deleteEndpoint("default", "web9", "p1");
    await b.sync();
    const [text] = rec.restores("v4");
    // declared: SVC = 1; rules: 1 masquerade + 2 balance = 3; nothing deleted.
    expect(lines(text, /^:/).length).toBe(1);
    expect(lines(text, /^-A /).length).toBe(3);
    expect(lines(text, /^-[DIX] /)).toEqual([]);
    expect(sequence(rec)).toEqual([
      { argv0: "iptables-restore", lines: expect.any(Array) },
      { argv0: "ipset", lines: [`del KPNG-HAIRPIN-V4 ${member(9 * 8 + 1)} -exist`] },
    ]);
  });

  test("a hairpin deletion runs after the sync resolved; if it fails, the next sync is full and rebuilds the set", async () => {
    let failDeletes = true;
    const rec = recordingExecutor(({ argv, stdin }) => {
      if (argv[0] === "ipset" && failDeletes && stdin?.startsWith("del ")) throw new Error("ipset: del failed");
      return "";
    });
    const b = new IptablesBackend(testContext(testConfig()), { executor: rec, families: ["v4"], monitorPeriodMs: 0 });
    b.setService(web(1));
    for (let e = 0; e < 2; e++) b.setEndpoint("default", "web1", `p${e}`, pod(8 + e));
    await b.sync();
    b.deleteEndpoint("default", "web1", "p1");
    await b.sync(); // resolves: the deletion is not on its path
    expect(b.lastSync?.full).toBe(false);
    failDeletes = false;
    rec.calls.length = 0;
    await b.sync();
    expect(b.lastSync?.full).toBe(true);
    expect(
      rec.calls
        .filter((c) => c.argv[0] === "ipset")
        .map((c) => c.stdin)
        .join(""),
    ).toContain(`swap KPNG-HAIRPIN-V4-NEW KPNG-HAIRPIN-V4`);
  });

  test("a hairpin member two services share stays until the last of them drops it", async () => {
    const { b, rec } = await loaded(3, 1);
    b.setEndpoint("default", "web2", "shared", pod(1 * 8)); // web1's endpoint, now also web2's
    await b.sync();
    expect(rec.calls.filter((c) => c.argv[0] === "ipset")).toEqual([]); // already a member
    b.deleteEndpoint("default", "web1", "p0");
    await b.sync();
    expect(rec.calls.filter((c) => c.argv[0] === "ipset")).toEqual([]); // web2 still holds it
    b.deleteEndpoint("default", "web2", "shared");
    await b.sync();
    expect(rec.calls.filter((c) => c.argv[0] === "ipset").map((c) => c.stdin)).toEqual([`del KPNG-HAIRPIN-V4 ${member(8)} -exist\n`]);
  });

  // 450 x 2 endpoints: below the large-cluster threshold, where comments would go and the input shrink.
  test("the restore after one endpoint change has the same size with 10 or 450 services", async () => {
    const sizes: number[] = [];
    for (const n of [10, 450]) {
      const { b, rec } = await loaded(n);
      b.setEndpoint("default", "web5", "p2", pod(5 * 8 + 2));
      await b.sync();
      sizes.push(rec.restores("v4")[0].length);
    }
    expect(sizes[0]).toBe(sizes[1]);
  });

  test("replaying every set call unchanged (brain restart) runs no restore at all", async () => {
    const { b, rec } = await loaded(20);
    for (let i = 1; i <= 20; i++) {
      b.setService(web(i)); // new objects, equal content
      for (let e = 0; e < 2; e++) b.setEndpoint("default", `web${i}`, `p${e}`, pod(i * 8 + e));
    }
    await b.sync();
    expect(b.lastSync).toMatchObject({ full: false, rendered: 0, bytes: { v4: 0 } });
    expect(rec.calls).toEqual([]);
  });

  test("replay with one real difference rewrites only that difference", async () => {
    const { b, rec } = await loaded(20);
    for (let i = 1; i <= 20; i++) {
      b.setService(web(i));
      for (let e = 0; e < 2; e++) b.setEndpoint("default", `web${i}`, `p${e}`, pod(i * 8 + (i === 3 && e === 1 ? 5 : e)));
    }
    await b.sync();
    expect(b.lastSync?.rendered).toBe(1);
    const text = rec.restores("v4")[0];
    // SVC rewritten = 1 declared; its rules: 1 masquerade + 2 balance = 3; the set swaps one member.
    expect(lines(text, /^:/).length).toBe(1);
    expect(lines(text, /^-A /).length).toBe(3);
    expect(
      sequence(rec)
        .filter((c) => c.argv0 === "ipset")
        .flatMap((c) => c.lines),
    ).toEqual([`add KPNG-HAIRPIN-V4 ${member(29)} -exist`, `del KPNG-HAIRPIN-V4 ${member(25)} -exist`]);
  });

  test("last endpoint removed: nat chains deleted, dispatch rule removed, filter REJECT inserted", async () => {
    const { b, rec } = await loaded(5, 1);
    b.deleteEndpoint("default", "web2", "p0");
    await b.sync();
    const text = rec.restores("v4")[0];
    expect(lines(text, /^-X /).length).toBe(1); // SVC (no SEP chain: the endpoint was DNATed from it)
    expect(lines(text, /^-D KPNG-SERVICES .*cluster IP/).length).toBe(1);
    expect(lines(text, /^-A KPNG-SERVICES .* -j REJECT$/).length).toBe(1);
    expect(text.indexOf("*filter")).toBeLessThan(text.indexOf("*nat"));
  });

  test("service deleted: every chain of it flushed and deleted, its fixed-chain rules removed", async () => {
    const { b, rec } = await loaded(5, 2);
    b.deleteEndpoint("default", "web4", "p0");
    b.deleteEndpoint("default", "web4", "p1");
    b.deleteService("default", "web4");
    await b.sync();
    const text = rec.restores("v4")[0];
    expect(lines(text, /^-X /).length).toBe(1); // SVC
    expect(lines(text, /^:/).length).toBe(1);
    expect(lines(text, /^-D /).length).toBe(1); // dispatch
    expect(lines(text, /^-[AI] /)).toEqual([]);
  });

  test("a new service gets its dispatch rule inserted at the head, above the node-port jump", async () => {
    const { b, rec } = await loaded(3);
    b.setService(web(99));
    b.setEndpoint("default", "web99", "p0", pod(99));
    await b.sync();
    expect(lines(rec.restores("v4")[0], /KPNG-SERVICES/)).toEqual([expect.stringMatching(/^-I KPNG-SERVICES 1 .*-d 198\.18\.0\.99 /)]);
  });

  test("endpoint set repeated with different keys for the same address and port: no change", async () => {
    const { b, rec } = await loaded(3, 1);
    b.deleteEndpoint("default", "web1", "p0");
    b.setEndpoint("default", "web1", "renamed", pod(8));
    await b.sync();
    expect(rec.calls).toEqual([]);
  });
});
