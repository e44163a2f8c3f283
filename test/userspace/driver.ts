// The userspace backend in a process of its own, inside the node namespace
// (a process's sockets live in the namespace it runs in; the test runner's
// are on the host). Reads node-local states as JSON lines on stdin, applies
// each, and answers one JSON line per state:
//   {"rev": 3, "ms": 1.2, "connections": {"tcp/198.18.0.10/80": 1, ...}}   or {"rev": 3, "error": "..."}
// (ms: the apply alone, without this driver's decoding)
// argv[2]: the Config overrides (JSON). Logs go to stderr.

import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { createLogger } from "../../src/core/log.ts";
import { EndpointSchema, ServiceSchema } from "../../src/gen/localv1/services_pb.ts";
import { createUserspaceBackend } from "../../plugins/userspace/index.ts";
import { node0Config } from "../fixtures/node-config.ts";
import type { NodeState, ServiceEndpoints } from "../../src/core/brain/state.ts";

export interface WireState {
  rev: number;
  nodeIPs?: string[];
  services: { service: JsonValue; endpoints: [string, JsonValue][] }[];
}

const config = node0Config(JSON.parse(process.argv[2] ?? "{}"));
const log = createLogger("driver");
const backend = createUserspaceBackend({ config, log, out: (t) => process.stderr.write(t) }, { udpIdleMs: 5_000 });
await backend.setup();
process.stdout.write("ready\n");

const decode = (w: WireState): NodeState => {
  const services = new Map<string, ServiceEndpoints>();
  for (const s of w.services) {
    const service = fromJson(ServiceSchema, s.service);
    services.set(`${service.Namespace}/${service.Name}`, {
      service,
      endpoints: new Map(s.endpoints.map(([k, e]) => [k, fromJson(EndpointSchema, e)])),
    });
  }
  return { nodeName: config.nodeName, rev: w.rev, services, nodeIPs: w.nodeIPs };
};

/** each service's JSON as last applied: what changed goes to apply() as the change set, as the feed does */
let applied = new Map<string, string>();
const changeOf = (w: WireState): Set<string> => {
  const now = new Map(
    w.services.map((s) => [
      `${(s.service as { Namespace?: string }).Namespace ?? ""}/${(s.service as { Name?: string }).Name ?? ""}`,
      JSON.stringify(s),
    ]),
  );
  const change = new Set<string>();
  for (const [k, j] of now) if (applied.get(k) !== j) change.add(k);
  for (const k of applied.keys()) if (!now.has(k)) change.add(k);
  applied = now;
  return change;
};

let rest = "";
let first = true;
for await (const chunk of Bun.stdin.stream()) {
  const lines = (rest + new TextDecoder().decode(chunk)).split("\n");
  rest = lines.pop()!;
  for (const line of lines) {
    if (!line.trim()) continue;
    const w = JSON.parse(line) as WireState;
    try {
      const change = changeOf(w);
      const state = decode(w);
      const t0 = performance.now();
      await backend.apply(state, first ? null : change);
      const ms = performance.now() - t0;
      first = false;
      process.stdout.write(JSON.stringify({ rev: w.rev, ms, connections: Object.fromEntries(backend.connections()) }) + "\n");
    } catch (err) {
      process.stdout.write(JSON.stringify({ rev: w.rev, error: String(err) }) + "\n");
    }
  }
}
await backend.close();
