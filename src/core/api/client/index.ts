// kpng's client library: following a brain over the API, as revisions of
// the node-local state (watchStates), change sets (watchChangeSets, Replica)
// or whole snapshots (nextSnapshot), plus the DiffStore. Import this module
// only (the rest is internal). It knows no Backend: feeding one from the API
// is the plugin host's job, with `run(handler)` in src/host/run.ts:
//
//   import { run } from "kpng/src/host/run.ts";
//   await run((state, change) => console.log(state.rev, state.services.size));
//
// See examples/plugins/print-changes.ts for a runnable example, and
// examples/plugins/jsonl-backend.ts for a Backend that runs unchanged in
// process (`kpng --plugin`) and as a sidecar (`kpng backend --plugin`).

export { DEFAULT_API, watchStates, type ClientOptions } from "./client.ts";
export { DiffStore, deepEqual, type Diff, type DiffStoreOptions } from "./diffstore.ts";
export type { ChangeSet } from "../../wire/ops.ts";
export { Replica, type SnapshotEntry } from "./replica.ts";
export { nextSnapshot, watchChangeSets, type Snapshot } from "./streams.ts";
export { connectGrpc, type GrpcConnection } from "./grpc.ts";
export { stateOps, type StateOp } from "../../brain/ops.ts";
export type { Revision } from "../../brain/brain.ts";
export type { Endpoint, NodeState, Service, ServiceEndpoints, StateChange } from "../../brain/state.ts";
