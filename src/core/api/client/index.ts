// kpng's client library: everything a backend process needs to follow a
// brain over the API. Import this module only (the rest is internal):
//
//   import { run } from "kpng/src/core/client/index.ts";
//   await run((state, change) => console.log(state.rev, state.services.size));
//
// See examples/plugins/print-changes.ts for a runnable example, and
// examples/plugins/jsonl-backend.ts for a Backend that runs unchanged in
// process (`kpng --plugin`) and as a sidecar (`kpng backend --plugin`).

export { DEFAULT_API, watchStates, type ClientOptions } from "./client.ts";
export { DiffStore, deepEqual, type Diff, type DiffStoreOptions } from "./diffstore.ts";
export { Replica, type ChangeSet, type SnapshotEntry } from "./replica.ts";
export { run, runFlags, type Handler, type RunOptions } from "./run.ts";
export { nextSnapshot, watchChangeSets, type Snapshot } from "./streams.ts";
export { connectGrpc, type GrpcConnection } from "./grpc.ts";
export { runSidecar, type SidecarOptions } from "../../../plugins/sidecar.ts";
export { stateOps, type StateOp } from "../../brain/ops.ts";
export type { Revision } from "../../brain/brain.ts";
export type { Endpoint, NodeState, Service, ServiceEndpoints, StateChange } from "../../brain/state.ts";
export type { Backend, BackendContext, BackendFactory, FullStateBackend, IncrementalBackend } from "../../../plugins/backend.ts";
