// The Kubernetes source under churn, measured on the real process: `kpng
// --kubeconfig K --backend nft --dry-run` follows an API server while this
// bench changes EndpointSlices and Services at a steady rate for one "hour"
// compressed into a minute. Printed: API events in vs node-local revisions
// out (the batching), and the process's memory over the run (flat = no
// growth). Figures only; nothing asserted.
//
// The API server (KPNG_BENCH_API, as bench/bench-api.ts): "real" (default),
// kube-apiserver 1.36.2 + etcd (test/harness/kube-apiserver.ts), changed by
// HTTP PATCH/POST/DELETE, at most 64 in flight (a 2-core host may not keep
// the compressed rate: the rate reached is printed); "fake", the in-repo test
// server (test/harness/api-server.ts), changed in memory.
//
// KPNG_BENCH_SECONDS (default 60) sets the compressed hour's length;
// KPNG_BENCH_HOURS (default 1) soaks longer at the same rate.
//
// The figures of a 1-hour and a 3-hour run: docs/results/2026-11.md.

import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { K8sEndpointSlice, K8sNode, K8sService } from "../src/core/brain/k8s/objects.ts";
import { asSent, node as nodeObject } from "../test/fixtures/k8s.ts";
import { syntheticService, syntheticSlice, type SyntheticOptions } from "../test/fixtures/synthetic.ts";
import { FakeApiServer } from "../test/harness/api-server.ts";
import { KubeApiServer } from "../test/harness/kube-apiserver.ts";
import { freePort } from "../test/fixtures/free-port.ts";
import { apiKind, apiLabel } from "./bench-api.ts";

const CLUSTER: SyntheticOptions = { services: 1000, endpoints: 10, nodes: 100, localEvery: 10 };
/** A busy cluster: 10 API changes a second, for an hour. */
const REAL_RATE_PER_S = 10;
const REAL_SECONDS_PER_HOUR = 3600;
/** kube-proxy's default --min-sync-period (1s), scaled like the clock. */
const REAL_MIN_SYNC_S = 1;

function scrape(text: string, name: string): number {
  let sum = 0;
  for (const line of text.split("\n"))
    if (line.startsWith(name + " ") || line.startsWith(name + "{")) sum += Number(line.slice(line.lastIndexOf(" ") + 1));
  return sum;
}

type Obj = K8sService | K8sEndpointSlice | K8sNode;

/** The cluster under churn, on either API server. */
interface Cluster {
  kubeconfig: string;
  /** a new object: taken in memory (fake), or POSTed (real) */
  create(o: Obj): void;
  /** a slice's endpoints replaced: in memory (fake), or by a merge PATCH (real) */
  update(o: K8sEndpointSlice): void;
  remove(kind: "Service" | "EndpointSlice", namespace: string, name: string): void;
  /** changes the API server has answered (real) or taken (fake) */
  readonly done: number;
  /** changes the API server refused */
  readonly failed: number;
  /** too many changes in flight to send another now (real): the bench falls behind its rate */
  busy(): boolean;
  /** every 5,000 changes: the fake compacts its history, as etcd's compaction does */
  compact(): void;
  close(): Promise<void>;
}

function fakeCluster(objects: Obj[], dir: string): Promise<Cluster> {
  return FakeApiServer.start().then((api) => {
    for (const o of objects) api.apply(o);
    api.compact();
    let done = 0;
    return {
      kubeconfig: api.writeKubeconfig(dir),
      create: (o) => (api.apply(o), done++),
      update: (o) => (api.apply(o), done++),
      remove: (kind, ns, name) => (api.remove(kind, ns, name), done++),
      get done() {
        return done;
      },
      failed: 0,
      busy: () => false,
      compact: () => api.compact(),
      close: () => api.close(),
    };
  });
}

const PATH = {
  Service: (ns: string) => `/api/v1/namespaces/${ns}/services`,
  EndpointSlice: (ns: string) => `/apis/discovery.k8s.io/v1/namespaces/${ns}/endpointslices`,
};
const IN_FLIGHT = 64;

/**
 * A synthetic object as the real API server takes it: a Service's cluster IPs
 * left for it to allocate (198.18.0.0 and .1 are not to be had), and no
 * externalTrafficPolicy on a ClusterIP Service (refused: "may only be set for
 * externally-accessible services").
 */
const allocated = (o: Obj): Obj =>
  o.kind === "Service"
    ? {
        ...o,
        spec: {
          ...o.spec,
          clusterIP: undefined,
          clusterIPs: undefined,
          externalTrafficPolicy: o.spec.type === "ClusterIP" ? undefined : o.spec.externalTrafficPolicy,
        },
      }
    : o;

async function realCluster(objects: Obj[], dir: string): Promise<Cluster> {
  const api = await KubeApiServer.start();
  const t0 = performance.now();
  await api.createMany(objects.map(allocated) as never, 32);
  console.log(`kube-apiserver filled with ${objects.length} objects in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  let inFlight = 0;
  let done = 0;
  let failed = 0;
  const send = (method: string, path: string, body?: unknown) => {
    inFlight++;
    void api
      .request(method, path, body)
      .then(
        (r) => (r.ok ? done++ : failed++),
        () => failed++,
      )
      .finally(() => inFlight--);
  };
  return {
    kubeconfig: api.writeKubeconfig(join(dir, "kubeconfig"), { user: "kube-proxy" }),
    create(o) {
      const apiVersion = o.kind === "EndpointSlice" ? "discovery.k8s.io/v1" : "v1";
      if (o.kind !== "Node") send("POST", PATH[o.kind](o.metadata.namespace ?? "default"), { apiVersion, ...asSent(allocated(o)) });
    },
    // a merge patch replaces the list whole
    update: (o) =>
      send("PATCH", `${PATH.EndpointSlice(o.metadata.namespace ?? "default")}/${o.metadata.name}`, {
        endpoints: (asSent(o) as { endpoints: unknown }).endpoints,
      }),
    remove: (kind, ns, name) => send("DELETE", `${PATH[kind](ns)}/${name}`),
    get done() {
      return done;
    },
    get failed() {
      return failed;
    },
    busy: () => inFlight >= IN_FLIGHT,
    compact: () => {},
    close: () => api.close(),
  };
}

const rssOf = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0) / 1024;
const mb = (n: number) => n.toFixed(1).padStart(7);

export default async function kubeBench() {
  const hours = Number(process.env.KPNG_BENCH_HOURS ?? 1);
  const REAL_SECONDS = REAL_SECONDS_PER_HOUR * hours;
  const seconds = Number(process.env.KPNG_BENCH_SECONDS ?? 60) * hours;
  const scale = REAL_SECONDS / seconds; // real seconds per bench second
  const ratePerS = REAL_RATE_PER_S * scale;
  const dir = mkdtempSync(join(tmpdir(), "kpng-bench-"));
  const kind = apiKind();
  console.log(`against ${apiLabel(kind)}`);
  const objects: Obj[] = [nodeObject("node-0", { ips: ["203.0.113.10"], zone: "zone-0" })];
  for (let i = 0; i < CLUSTER.services; i++) objects.push(syntheticService(i, CLUSTER), syntheticSlice(i, CLUSTER));
  const api = await (kind === "real" ? realCluster : fakeCluster)(objects, dir);
  const port = await freePort();
  const minSync = `${Math.max(1, Math.round((REAL_MIN_SYNC_S / scale) * 1000))}ms`;
  const root = join(import.meta.dir, "..");
  const child = Bun.spawn(
    [
      process.execPath,
      join(root, "src/main.ts"),
      "--kubeconfig",
      api.kubeconfig,
      "--backend",
      "nft",
      "--dry-run",
      "--hostname-override",
      "node-0",
      "--metrics-bind-address",
      `127.0.0.1:${port}`,
      "--healthz-bind-address",
      "",
      "--min-sync-period",
      minSync,
    ],
    { cwd: root, stdout: "ignore", stderr: "ignore", env: { ...process.env, KPNG_LOG_LEVEL: "warn" } },
  );
  const metrics = async () => {
    for (let i = 0; i < 200; i++) {
      try {
        return await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      } catch {
        await Bun.sleep(50);
      }
    }
    throw new Error("kpng's metrics never answered");
  };

  // Wait for the first full sync of the whole cluster.
  const t0 = performance.now();
  while (scrape(await metrics(), "kubeproxy_sync_proxy_rules_duration_seconds_count") < 1) await Bun.sleep(50);
  const firstSync = (performance.now() - t0) / 1000;
  const base = await metrics();
  const start = {
    events: scrape(base, "kpng_api_events_total"),
    brain: scrape(base, "kpng_brain_events_total"),
    revisions: scrape(base, "kpng_node_revisions_total"),
    syncs: scrape(base, "kubeproxy_sync_proxy_rules_duration_seconds_count"),
  };

  console.log(
    `cluster: ${CLUSTER.services} services x ${CLUSTER.endpoints} endpoints over ${CLUSTER.nodes} nodes; first full sync after ${firstSync.toFixed(2)}s`,
  );
  console.log(
    `churn: ${REAL_RATE_PER_S} changes/s for ${REAL_SECONDS / 60} min, compressed x${scale} into ${seconds}s (${Math.round(ratePerS)}/s); --min-sync-period ${minSync} (1s x 1/${scale})`,
  );
  console.log(`\n  equiv. min |  API events in | revisions out | ratio | RSS MB | heap MB`);

  const gens = new Map<number, number>();
  let sent = 0;
  /** live services are lo .. lo+services-1: a deploy retires the oldest and adds one */
  let lo = 0;
  const samples: Array<{ rss: number; heap: number }> = [];
  const began = performance.now();
  let nextSample = 0;
  while (performance.now() - began < seconds * 1000) {
    const due = Math.floor(((performance.now() - began) / 1000) * ratePerS);
    for (; sent < due && !api.busy(); sent++) {
      if (sent % 200 === 199) {
        // Now and then a service goes and another comes (a deploy).
        api.remove("EndpointSlice", `ns-${lo % 50}`, `svc-${lo}-abcde`);
        api.remove("Service", `ns-${lo % 50}`, `svc-${lo}`);
        gens.delete(lo);
        const fresh = lo + CLUSTER.services;
        api.create(syntheticService(fresh, CLUSTER));
        api.create(syntheticSlice(fresh, CLUSTER));
        lo++;
      } else {
        // Mostly: one pod of one service replaced.
        const i = lo + ((sent * 7919) % CLUSTER.services);
        const gen = (gens.get(i) ?? 0) + 1;
        gens.set(i, gen);
        api.update(syntheticSlice(i, CLUSTER, gen, gen % CLUSTER.endpoints));
      }
      if (sent % 5000 === 4999) api.compact();
    }
    const elapsed = (performance.now() - began) / 1000;
    if (elapsed >= nextSample) {
      const m = await metrics();
      const events = scrape(m, "kpng_api_events_total") - start.events;
      const revisions = scrape(m, "kpng_node_revisions_total") - start.revisions;
      const rss = rssOf(child.pid);
      const heap = scrape(m, "nodejs_heap_size_used_bytes") / 2 ** 20;
      samples.push({ rss, heap });
      console.log(
        `  ${String(Math.round((elapsed * scale) / 60)).padStart(10)} | ${String(events).padStart(14)} | ${String(revisions).padStart(13)} | ${(revisions ? events / revisions : 0).toFixed(1).padStart(5)} | ${mb(rss)} | ${mb(heap)}`,
      );
      nextSample += seconds / (12 * hours);
    }
    await Bun.sleep(5);
  }
  await Bun.sleep(1000);
  const end = await metrics();
  const events = scrape(end, "kpng_api_events_total") - start.events;
  const revisions = scrape(end, "kpng_node_revisions_total") - start.revisions;
  const syncs = scrape(end, "kubeproxy_sync_proxy_rules_duration_seconds_count") - start.syncs;
  const floor = (xs: typeof samples, k: "rss" | "heap") => Math.min(...xs.map((x) => x[k]));
  const [first, second] = [samples.slice(1, Math.ceil(samples.length / 2)), samples.slice(Math.ceil(samples.length / 2))];
  console.log(
    `\nAPI changes answered: ${api.done} (${(api.done / seconds).toFixed(0)}/s against ${Math.round(ratePerS)}/s asked), refused: ${api.failed}`,
  );
  console.log(
    `\nchurn steps: ${sent} (a deploy is 4 API changes); API events in: ${events}; brain events: ${scrape(end, "kpng_brain_events_total") - start.brain}; node-local revisions out: ${revisions} (${(events / Math.max(1, revisions)).toFixed(1)} events per revision); nft syncs: ${syncs}; relists: ${scrape(end, "kpng_api_relists_total")}; failures: ${scrape(end, "kpng_backend_sync_failures_total")}`,
  );
  // The heap's floor (its lowest sample, just after a collection) is what would grow with a leak.
  console.log(`memory after the first sync: RSS ${mb(samples[0].rss)} MB, heap ${mb(samples[0].heap)} MB`);
  console.log(`memory floor, first half of the run:  RSS ${mb(floor(first, "rss"))} MB, heap ${mb(floor(first, "heap"))} MB`);
  console.log(`memory floor, second half of the run: RSS ${mb(floor(second, "rss"))} MB, heap ${mb(floor(second, "heap"))} MB`);
  child.kill("SIGTERM");
  await child.exited;
  await api.close();
  rmSync(dir, { recursive: true, force: true });
}

if (import.meta.main) await kubeBench();
