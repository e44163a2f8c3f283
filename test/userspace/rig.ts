// The userspace suites' rig: the backend running in the node namespace
// (driver.ts) fed states from here, and long-lived connections from the
// client namespace (hold.py), over the netns topology of test/harness.

import { toJson } from "@bufbuild/protobuf";
import { join } from "node:path";
import type { Config } from "../../src/core/config/config.ts";
import type { ServiceEndpoints } from "../../src/core/brain/state.ts";
import { EndpointSchema, ServiceSchema } from "../../src/gen/localv1/services_pb.ts";
import { BUN } from "../harness/kpng-process.ts";
import { pythonPath, saidReady, type Pod, type Topology } from "../harness/netns.ts";
import type { WireState } from "./driver.ts";

const here = import.meta.dir;

/** Reads a child's stdout line by line. */
function lineReader(stream: ReadableStream<Uint8Array>) {
  const reader = stream.getReader();
  const dec = new TextDecoder();
  let buf = "";
  return async (timeoutMs: number, what: string): Promise<string> => {
    const deadline = Date.now() + timeoutMs;
    while (!buf.includes("\n")) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timeout waiting for ${what}`);
      const r = await Promise.race([reader.read(), Bun.sleep(left).then(() => "timeout" as const)]);
      if (r === "timeout") continue;
      if (r.done) throw new Error(`${what}: the process ended`);
      buf += dec.decode(r.value, { stream: true });
    }
    const i = buf.indexOf("\n");
    const line = buf.slice(0, i);
    buf = buf.slice(i + 1);
    return line;
  };
}

export interface RelayProxy {
  /** applies a full state; resolves with the open connections per frontend */
  apply(entries: ServiceEndpoints[]): Promise<Record<string, number>>;
  /** how long the last apply took in the backend, ms */
  readonly lastMs: number;
  stop(): Promise<void>;
  /** `kill -9`: the process ends without closing anything (what it made in the kernel stays) */
  kill(): Promise<void>;
  /** the driver's log so far */
  readonly log: string[];
  /** the driver's process id (`ip netns exec` execs it): benchmarks read its CPU time */
  readonly pid: number;
}

/** Starts the userspace backend in the node namespace (only `topo.node.ns` is used). */
export async function startProxy(topo: Pick<Topology, "node">, config: Partial<Config> = {}): Promise<RelayProxy> {
  const p = Bun.spawn(["ip", "netns", "exec", topo.node.ns, BUN, join(here, "driver.ts"), JSON.stringify(config)], {
    stdin: "pipe",
    stdout: "pipe",
    stderr: "pipe",
  });
  const log: string[] = [];
  void (async () => {
    for await (const chunk of p.stderr) log.push(...new TextDecoder().decode(chunk).split("\n").filter(Boolean));
  })();
  const next = lineReader(p.stdout);
  const first = await next(20_000, "the driver's ready line").catch((err) => {
    throw new Error(`${err}\n${log.join("\n")}`);
  });
  if (first !== "ready") throw new Error(`driver: ${first}\n${log.join("\n")}`);
  let rev = 0;
  let lastMs = 0;
  return {
    get lastMs() {
      return lastMs;
    },
    log,
    pid: p.pid,
    async apply(entries) {
      const w: WireState = {
        rev: ++rev,
        services: entries.map((e) => ({
          service: toJson(ServiceSchema, e.service),
          endpoints: [...e.endpoints].map(([k, ep]) => [k, toJson(EndpointSchema, ep)]),
        })),
      };
      p.stdin.write(JSON.stringify(w) + "\n");
      await p.stdin.flush();
      const answer = JSON.parse(await next(120_000, `rev ${w.rev} applied`)) as {
        rev: number;
        ms?: number;
        connections?: Record<string, number>;
        error?: string;
      };
      lastMs = answer.ms ?? 0;
      if (answer.error) throw new Error(`apply rev ${w.rev}: ${answer.error}\n${log.slice(-10).join("\n")}`);
      return answer.connections ?? {};
    },
    async stop() {
      p.stdin.end();
      const t = setTimeout(() => p.kill(), 5_000);
      await p.exited;
      clearTimeout(t);
    },
    async kill() {
      p.kill("SIGKILL");
      await p.exited;
    },
  };
}

export type HoldResult = { id: number; ok: true; answer: string } | { id: number; ok: false; error: string };

export interface Holder {
  open(id: number, ip: string, port: number): Promise<HoldResult>;
  ping(id: number): Promise<HoldResult>;
  stop(): Promise<void>;
}

/** A client in `ns` keeping TCP connections open (hold.py client). */
export async function holder(ns: string): Promise<Holder> {
  const p = Bun.spawn(["ip", "netns", "exec", ns, await pythonPath(), "-u", "-S", join(here, "hold.py"), "client"], {
    stdin: "pipe",
    stdout: "pipe",
    stderr: "inherit",
  });
  const next = lineReader(p.stdout);
  const send = async (cmd: object): Promise<HoldResult> => {
    p.stdin.write(JSON.stringify(cmd) + "\n");
    await p.stdin.flush();
    return JSON.parse(await next(10_000, JSON.stringify(cmd))) as HoldResult;
  };
  return {
    open: (id, ip, port) => send({ op: "open", id, ip, port }),
    ping: (id) => send({ op: "ping", id }),
    async stop() {
      p.stdin.end();
      await p.exited;
    },
  };
}

/** Starts hold.py's server in a pod; returns its stop. */
export async function holdServer(pod: Pod, port: number): Promise<() => Promise<void>> {
  const p = Bun.spawn(
    ["ip", "netns", "exec", pod.ns, await pythonPath(), "-u", "-S", join(here, "hold.py"), "serve", pod.name, String(port)],
    {
      stdout: "pipe",
      stderr: "inherit",
    },
  );
  if (!(await saidReady(p.stdout))) throw new Error(`hold.py server in ${pod.ns} did not start`);
  return async () => {
    p.kill();
    await p.exited;
  };
}
