// The lists of a kpng start-up, timed from the client's side with nothing
// done to what arrives: run by the start-up bench inside the node's network
// namespace (`ip netns exec NS bun bench/list-probe.ts KUBECONFIG NODE MODE`),
// with kpng's credentials, selectors and Accept header (kube.ts
// resourceSpecs: protobuf, as kube-proxy), the three kinds at once as kpng
// asks for them. MODE:
//
//   - "watch": each kind's list streamed (sendInitialEvents, client-go's
//     watch-list, kpng's default): the last byte is the end of the frame
//     holding the BOOKMARK annotated k8s.io/initial-events-end;
//   - "pages": each kind listed by GETs of 500 (resourceVersion 0, then the
//     continue token), one after another; the last byte is the end of the
//     last page.
//
// The frames and pages are cut apart, never decoded (a page's ListMeta is
// read for its continue token, which comes before its items): what the
// times say is the API server's and the network's, not a decoder's.
// A GET /version first warms the process's TLS code (not timed).
// Prints one JSON line per kind: {kind, mode, headersMs, firstByteMs,
// lastByteMs, bytes, requests, chunks}, times from the moment the requests
// were sent. chunks: the reads the bytes came in (kube-apiserver 1.36 writes
// an HTTP/1.1 body in chunks of at most 2 KB, and a streamed list flushes
// after each event the API server's cache hands over: ~10,000 reads a kind
// at 10,000 objects, each a cost of its own in the client).

import type { IncomingMessage } from "node:http";
import { defaultConfig } from "../src/core/config/config.ts";
import { resourceSpecs } from "../src/core/sources/kube.ts";
import { expectOK, kubeGet, readBody } from "../src/core/kube-http/request.ts";
import { loadKubeConfig } from "../src/core/sources/kubeconfig.ts";
import { ListDecoder } from "../src/core/sources/protobuf/envelope.ts";

export interface ListTiming {
  kind: string;
  mode: "watch" | "pages";
  headersMs: number;
  firstByteMs: number;
  lastByteMs: number;
  bytes: number;
  requests: number;
  /** reads the answers came in: kube-apiserver's HTTP/1.1 bodies come in chunks of at most 2 KB (Go's net/http) */
  chunks: number;
}

const INITIAL_EVENTS_END = Buffer.from("k8s.io/initial-events-end");

/** a watch answer's frames (4-byte big-endian length, then the frame) until the one that ends the initial events */
async function untilInitialEventsEnd(res: IncomingMessage, t: ListTiming, t0: number) {
  let pending = Buffer.alloc(0);
  for await (const c of res) {
    const chunk = c as Buffer;
    if (!t.bytes) t.firstByteMs = performance.now() - t0;
    t.bytes += chunk.length;
    t.chunks++;
    let buf = pending.length ? Buffer.concat([pending, chunk]) : chunk;
    let pos = 0;
    while (buf.length - pos >= 4) {
      const len = buf.readUInt32BE(pos);
      if (buf.length - pos - 4 < len) break;
      const frame = buf.subarray(pos + 4, pos + 4 + len);
      pos += 4 + len;
      // only a bookmark carries the annotation; ADDED objects are far bigger than a bookmark, skip reading them
      if (len < 512 && frame.includes(INITIAL_EVENTS_END)) {
        t.lastByteMs = performance.now() - t0;
        res.destroy();
        return;
      }
    }
    buf = buf.subarray(pos);
    pending = Buffer.from(buf);
  }
  throw new Error(`${t.kind}: the stream ended before its initial events did`);
}

async function probe(
  kind: string,
  spec: ReturnType<typeof resourceSpecs>["Service"],
  mode: ListTiming["mode"],
  access: ReturnType<typeof loadKubeConfig>,
) {
  const get = kubeGet(access, spec.accept);
  const t: ListTiming = { kind, mode, headersMs: 0, firstByteMs: 0, lastByteMs: 0, bytes: 0, requests: 0, chunks: 0 };
  const sel = { labelSelector: spec.labelSelector, fieldSelector: spec.fieldSelector };
  const signal = AbortSignal.timeout(120_000);
  const t0 = performance.now();
  try {
    if (mode === "watch") {
      const q = {
        ...sel,
        watch: "true",
        allowWatchBookmarks: "true",
        sendInitialEvents: "true",
        resourceVersionMatch: "NotOlderThan",
        resourceVersion: "",
      };
      const res = await expectOK(await get(spec.path, q, signal));
      t.requests = 1;
      t.headersMs = performance.now() - t0;
      await untilInitialEventsEnd(res, t, t0);
      return t;
    }
    let cont: string | undefined;
    do {
      const q = { ...sel, limit: "500", ...(cont ? { continue: cont } : { resourceVersion: "0" }) };
      const res = await expectOK(await get(spec.path, q, signal));
      if (!t.requests++) t.headersMs = performance.now() - t0;
      // the ListMeta comes before the items: decode until it is in, then only count bytes
      let meta: { continue: string } | undefined;
      const decoder = new ListDecoder(kind, (m) => (meta = m));
      for await (const c of res) {
        const chunk = c as Buffer;
        if (!t.bytes) t.firstByteMs = performance.now() - t0;
        t.bytes += chunk.length;
        t.chunks++;
        if (!meta) decoder.push(chunk);
      }
      cont = (meta as { continue: string } | undefined)?.continue || undefined;
    } while (cont);
    t.lastByteMs = performance.now() - t0;
    return t;
  } finally {
    get.close();
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/**
 * Runs this file `rounds` times per mode in `ns`, the modes alternating
 * (watch, pages, watch, ...) so load on the host falls on both alike; lines
 * to print: per mode, each kind's median headers / first byte / last byte,
 * and when the last kind was in.
 */
export async function probeLists(opts: {
  ns: string;
  kubeconfig: string;
  node: string;
  rounds: number;
  where?: string;
}): Promise<string[]> {
  const runs: Record<ListTiming["mode"], ListTiming[][]> = { watch: [], pages: [] };
  const failed: Partial<Record<ListTiming["mode"], string>> = {};
  for (let r = 0; r < opts.rounds; r++)
    for (const mode of ["watch", "pages"] as const) {
      const p = Bun.spawn(["ip", "netns", "exec", opts.ns, process.execPath, import.meta.path, opts.kubeconfig, opts.node, mode], {
        stdout: "pipe",
        stderr: "pipe",
      });
      const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
      // a list the connection was cut under (ECONNRESET on the cache's one-piece list of 50,000 slices, a loaded
      // host, 2026-11-29) is a figure too, not the end of the bench and of its API server
      if (code !== 0) {
        failed[mode] ??= /error: .*/.exec(err)?.[0] ?? `exit ${code}`;
        continue;
      }
      runs[mode].push(
        out
          .split("\n")
          .filter(Boolean)
          .map((l) => JSON.parse(l) as ListTiming),
      );
    }
  const f = (x: number) => x.toFixed(0);
  return (["watch", "pages"] as const).map((mode) => {
    const label = `  lists by hand${opts.where ?? ""}, ${mode === "watch" ? "streamed (watch-list)" : "by pages of 500"}`;
    if (!runs[mode].length) return `${label}: failed (${failed[mode]})`;
    const kinds = runs[mode][0].map((t) => t.kind);
    const per = kinds.map((kind) => {
      const ts = runs[mode].map((run) => run.find((t) => t.kind === kind)!);
      const m = (k: "headersMs" | "firstByteMs" | "lastByteMs") => f(median(ts.map((t) => t[k])));
      return `${kind} ${m("headersMs")}/${m("firstByteMs")}/${m("lastByteMs")} (${(ts[0].bytes / 1048576).toFixed(1)} MiB in ${ts[0].chunks} reads, ${ts[0].requests} req)`;
    });
    const all = f(median(runs[mode].map((run) => Math.max(...run.map((t) => t.lastByteMs)))));
    return `${label}, median of ${runs[mode].length}${failed[mode] ? ` (${opts.rounds - runs[mode].length} failed: ${failed[mode]})` : ""}: headers/first byte/last byte ms: ${per.join("; ")}; all in at ${all} ms`;
  });
}

if (import.meta.main) {
  const [kubeconfig, nodeName, mode] = process.argv.slice(2);
  if (!kubeconfig || !nodeName || (mode !== "watch" && mode !== "pages"))
    throw new Error("usage: list-probe.ts KUBECONFIG NODE watch|pages");
  const access = loadKubeConfig({ kubeconfig });
  const specs = resourceSpecs(defaultConfig({ nodeName }));
  // a first request of its own, so the lists' times hold neither this process's cold TLS code nor its module loading
  // (their own connections' handshakes they do hold, as kpng's do)
  const warm = kubeGet(access);
  await readBody(await warm("/version", {}, AbortSignal.timeout(60_000)));
  warm.close();
  const out = await Promise.all(Object.entries(specs).map(([kind, spec]) => probe(kind, spec, mode, access)));
  for (const t of out) console.log(JSON.stringify(t));
  process.exit(0);
}
