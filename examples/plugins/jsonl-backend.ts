// A third-party-style kpng backend: writes every change it is given as one
// JSON line, then a `sync` line closing the change set. Handy to see what a
// backend receives, and used by kpng's tests against the compiled binary.
//
//   kpng --input cluster.yaml --plugin ./examples/plugins/jsonl-backend.ts   # in process
//   kpng backend --api unix:///run/kpng.sock --plugin ./examples/plugins/jsonl-backend.ts   # sidecar
//
// Lines go to the file named by $KPNG_JSONL_FILE (appended), else to stdout.
// A plugin is loaded from disk by the compiled kpng binary, so it imports
// kpng's *types* only; Node's built-in modules are available.

import { appendFileSync } from "node:fs";
import type { BackendContext, BackendFactory, Endpoint, IncrementalBackend, Service } from "../../src/host/toolkit/index.ts";

// protobuf-es messages are plain objects; drop their type tag for readability.
const json = (v: unknown) =>
  JSON.stringify(v, (k, x: unknown) => (k === "$typeName" ? undefined : typeof x === "bigint" ? x.toString() : x));

const factory: BackendFactory = (ctx: BackendContext) => {
  const file = process.env.KPNG_JSONL_FILE;
  const write = file ? (text: string) => appendFileSync(file, text) : ctx.out;
  let lines: string[] = [];
  let syncs = 0;
  return {
    name: "jsonl",
    kind: "incremental",
    setService(service: Service) {
      lines.push(json({ op: "setService", key: `${service.Namespace}/${service.Name}`, service }));
    },
    deleteService(namespace: string, name: string) {
      lines.push(json({ op: "deleteService", key: `${namespace}/${name}` }));
    },
    setEndpoint(namespace: string, serviceName: string, key: string, endpoint: Endpoint) {
      lines.push(json({ op: "setEndpoint", key: `${namespace}/${serviceName}/${key}`, endpoint }));
    },
    deleteEndpoint(namespace: string, serviceName: string, key: string) {
      lines.push(json({ op: "deleteEndpoint", key: `${namespace}/${serviceName}/${key}` }));
    },
    async sync() {
      lines.push(json({ op: "sync", n: ++syncs, node: ctx.config.nodeName }));
      // One write per change set, so a reader never sees half of one.
      write(lines.join("\n") + "\n");
      lines = [];
    },
  } satisfies IncrementalBackend;
};

export default factory;
