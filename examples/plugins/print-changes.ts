// A standalone backend process built on kpng's client library: prints one
// line per revision of the node-local state the brain serves.
//
//   kpng serve --input examples/cluster.yaml --listen unix:///tmp/kpng.sock &
//   bun examples/plugins/print-changes.ts --api unix:///tmp/kpng.sock --node-name node-1 [--once] [--protocol next]
//
// `run` reconnects forever (a restarted brain costs nothing: only real
// changes are reported), and returns on SIGINT/SIGTERM, or after the first
// state with --once.

import { run } from "../../src/host/run.ts";

await run((state, change) => {
  const endpoints = [...state.services.values()].reduce((n, s) => n + s.endpoints.size, 0);
  const changed = change === null ? "all" : [...change].sort().join(",");
  console.log(`rev=${state.rev} node=${state.nodeName} services=${state.services.size} endpoints=${endpoints} changed=${changed}`);
});
