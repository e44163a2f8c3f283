// Faults with real processes: two brains (`kpng serve`) on one cluster file
// and a node agent (`kpng --api A --api B`, nft backend in dry-run). The
// backend's "synced ... changed=" log line says what each sync was: `all` is
// a full rewrite, a number is a diff of that many services.

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { nftDryRun, ROOT, settled, startKpng, startServe, tempDir, type KpngProcess } from "../harness/kpng-process.ts";
import { loadedBound } from "../harness/load.ts";

const dir = tempDir("kpng-faults-");
const input = join(dir.path, "cluster.yaml");
const sockA = join(dir.path, "a.sock");
const sockB = join(dir.path, "b.sock");
const running: KpngProcess[] = [];

const brain = async (sock: string) => {
  const p = await startServe(["--input", input, "--node-name", "node-1", "--listen", `unix://${sock}`]);
  running.push(p);
  return p;
};
const agent = () => {
  const p = startKpng(["--api", `unix://${sockA}`, "--api", `unix://${sockB}`, ...nftDryRun("node-1")]);
  running.push(p);
  return p;
};
const syncs = (p: KpngProcess) => p.stderr.filter((l) => /synced backend=nft/.test(l)).map((l) => /changed=(\S+)/.exec(l)![1]);

/** Moves one endpoint of shop/web to a new address (one service changes). */
const moveEndpoint = (from: string, to: string) =>
  writeFileSync(input, readFileSync(input, "utf8").replace(new RegExp(`${from.replaceAll(".", "\\.")}$`, "m"), to));

beforeAll(() => dir.create());
afterEach(async () => {
  for (const p of running.splice(0)) await p.stop("SIGKILL");
});
afterAll(() => dir.remove());

describe("node agent faults", () => {
  test("a brain killed under the agent: it follows the next within 2 s and resyncs without rewriting its rules", async () => {
    copyFileSync(join(ROOT, "examples/cluster.yaml"), input);
    const a = await brain(sockA);
    await brain(sockB);
    const ag = agent();
    await ag.waitFor(/synced backend=nft rev=1 .*changed=all/);
    expect(ag.stderr.some((l) => l.includes(`following brain api=unix://${sockA}`))).toBe(true);
    const killed = performance.now();
    await a.stop("SIGKILL");
    const line = await ag.waitFor(new RegExp(`following brain api=unix://${sockB.replaceAll(".", "\\.")} resync=true`));
    const movedMs = performance.now() - killed;
    console.log(`agent moved to the second brain in ${movedMs.toFixed(0)} ms`);
    expect(movedMs).toBeLessThan(loadedBound(2000));
    // The second brain's model equals what the agent had: nothing decoded, nothing computed, no sync.
    expect(line).toMatch(/changed=0 unchanged=[1-9]\d*$/);
    await Bun.sleep(200);
    expect(syncs(ag)).toEqual(["all"]);
    // and it follows the new brain: one endpoint change is one partial sync
    moveEndpoint("198.19.1.10", "198.19.1.11");
    await ag.waitFor(/synced backend=nft rev=2 .*changed=1/);
    await settled(ag.stdout); // the log line (stderr) can overtake the transaction (stdout)
    expect(ag.stdout.join("\n")).toContain("198.19.1.11");
  }, 150_000);

  test("a brain that stops answering (SIGSTOP, as a host that vanished): the agent moves on after 3 s of silence", async () => {
    copyFileSync(join(ROOT, "examples/cluster.yaml"), input);
    const a = await brain(sockA);
    await brain(sockB);
    const ag = agent();
    await ag.waitFor(/synced backend=nft rev=1 .*changed=all/);
    const frozen = performance.now();
    a.proc.kill("SIGSTOP");
    try {
      await ag.waitFor(new RegExp(`following brain api=unix://${sockB.replaceAll(".", "\\.")} resync=true changed=0 `));
      const movedMs = performance.now() - frozen;
      console.log(`agent left the frozen brain in ${movedMs.toFixed(0)} ms`);
      // 3 s without a ping answer, noticed within 1.5 s more, then the next brain's resync
      expect(movedMs).toBeGreaterThan(2900);
      expect(movedMs).toBeLessThan(loadedBound(6000));
      expect(ag.stderr.some((l) => l.includes("no answer to a ping"))).toBe(true);
      expect(syncs(ag)).toEqual(["all"]);
    } finally {
      a.proc.kill("SIGCONT");
    }
  }, 150_000);

  test("all brains down: rules untouched; the agent reconnects when one returns and applies the change as a diff", async () => {
    copyFileSync(join(ROOT, "examples/cluster.yaml"), input);
    const a = await brain(sockA);
    const b = await brain(sockB);
    const ag = agent();
    await ag.waitFor(/synced backend=nft rev=1 .*changed=all/);
    // The log line (stderr) can overtake the end of the transaction (stdout): let stdout settle.
    const printed = await settled(ag.stdout);
    await a.stop("SIGKILL");
    await b.stop("SIGKILL");
    await ag.waitFor(new RegExp(`global stream failed.*${sockB.replaceAll(".", "\\.")}`));
    await Bun.sleep(500);
    // Nothing printed means nothing applied: the dry run prints every transaction.
    expect(ag.stdout.length).toBe(printed);
    expect(ag.proc.exitCode).toBeNull();
    moveEndpoint("198.19.1.10", "198.19.1.12"); // the cluster changes while no brain runs
    await brain(sockA);
    await ag.waitFor(new RegExp(`following brain api=unix://${sockA.replaceAll(".", "\\.")} resync=true changed=1 `));
    await ag.waitFor(/synced backend=nft rev=2 .*changed=1/);
    expect(syncs(ag)).toEqual(["all", "1"]);
    await settled(ag.stdout); // as above: the log line can overtake the transaction
    const diff = ag.stdout.slice(printed).join("\n");
    expect(diff).toContain("198.19.1.12");
    expect(diff).not.toContain("add table");
  }, 150_000);

  test("/metrics of a running agent: the brain it follows, failovers, stream failures, what the stream brought, when", async () => {
    copyFileSync(join(ROOT, "examples/cluster.yaml"), input);
    const a = await brain(sockA);
    await brain(sockB);
    const ag = agent();
    const address = /serving metrics address=(\S+)/.exec(await ag.waitFor(/serving metrics address=/))![1];
    await ag.waitFor(/synced backend=nft rev=1 /);
    const scrape = async () => {
      const text = await (await fetch(`http://${address}/metrics`)).text();
      return (series: string) =>
        Number(
          text
            .split("\n")
            .find((l) => l.startsWith(`${series} `))
            ?.slice(series.length + 1),
        );
    };
    let m = await scrape();
    expect(m(`kpng_global_brain_connected{api="unix://${sockA}"}`)).toBe(1);
    expect(m(`kpng_global_brain_connected{api="unix://${sockB}"}`)).toBe(0);
    expect(m("kpng_global_connects_total")).toBe(1);
    const ops = m("kpng_global_ops_total");
    expect(ops).toBeGreaterThan(0); // the whole model: every service, endpoint and node
    expect(m("kpng_global_change_sets_total")).toBe(1);
    await a.stop("SIGKILL");
    await ag.waitFor(/following brain .*resync=true/);
    moveEndpoint("198.19.1.10", "198.19.1.13");
    await ag.waitFor(/synced backend=nft rev=2 /);
    m = await scrape();
    expect(m(`kpng_global_brain_connected{api="unix://${sockA}"}`)).toBe(0);
    expect(m(`kpng_global_brain_connected{api="unix://${sockB}"}`)).toBe(1);
    expect(m("kpng_global_connects_total")).toBe(2);
    expect(m("kpng_global_failovers_total")).toBe(1);
    expect(m(`kpng_global_stream_failures_total{api="unix://${sockA}"}`)).toBeGreaterThanOrEqual(1);
    // the resync sent the whole model again, all of it unchanged; then one endpoint moved (a delete and a set)
    expect(m("kpng_global_unchanged_items_total")).toBe(ops);
    expect(m("kpng_global_ops_total")).toBe(2 * ops + 2);
    expect(m("kpng_global_change_sets_total")).toBe(3);
    // a recent time: the change set's, seconds ago at most (on a machine with a core to spare)
    expect(Math.abs(m("kpng_global_last_change_set_timestamp_seconds") - Date.now() / 1000)).toBeLessThan(loadedBound(5_000) / 1000);
  }, 150_000);

  test("an agent restarted while no brain answers: nothing applied until its first sync", async () => {
    copyFileSync(join(ROOT, "examples/cluster.yaml"), input);
    const ag = agent();
    await ag.waitFor(/global stream failed/);
    await Bun.sleep(700);
    expect(ag.stdout).toEqual([]);
    expect(syncs(ag)).toEqual([]);
    expect(ag.proc.exitCode).toBeNull();
    await brain(sockB);
    // the agent's backoff has reached up to 5 s by now, and the brain starts on a loaded machine
    await ag.waitFor(/synced backend=nft rev=1 .*changed=all/);
    await settled(ag.stdout); // the log line (stderr) can overtake the transaction (stdout)
    expect(ag.stdout.join("\n")).toContain("add table");
  }, 150_000);
});
