// The backend toolkit: everything a backend imports from kpng, built-in or a
// `--plugin ./x.ts` of a third party. A backend imports this module and
// nothing else of kpng (test/host/toolkit/toolkit.test.ts checks the built-ins),
// so the core's rooms can change without touching a backend.
//
// - the contract: the Backend interface, its context, config and logger types,
//   the executor seam, the metrics hooks;
// - the node-local types: NodeState, Service, Endpoint, ... (the generated
//   localv1 messages), the Protocol enum, and their equality (sameService,
//   sameEndpoint);
// - families and addresses (family.ts), the node's addresses (node-addresses.ts);
// - the questions every backend asks of a service port (service-port.ts);
// - stale UDP conntrack cleanup (conntrack.ts);
// - running a program (command.ts);
// - kpng's error type.
//
// A plugin loaded by the compiled binary can resolve no kpng module at run
// time: it imports types from here (`import type`) and finds the functions
// in its BackendContext (`ctx.toolkit`, set by the loader).

export type {
  Backend,
  BackendContext,
  BackendFactory,
  BackendMetrics,
  Drift,
  Executor,
  FullStateBackend,
  IncrementalBackend,
  NodeWarning,
} from "../backend.ts";
export type { Config } from "../../core/config/config.ts";
export type { Logger } from "../../core/log.ts";
export type { NodeState, ServiceEndpoints, StateChange } from "../../core/brain/state.ts";
export { serviceKey, splitServiceKey } from "../../core/brain/state.ts";
export type { ClientIPAffinity, Endpoint, EndpointScopes, IPFilter, IPSet, PortMapping, Service } from "../../gen/localv1/services_pb.ts";
// The generated enum's twin, and equality of two services or endpoints: no value of the generated
// file is imported, whose descriptor registry a node would otherwise build at every start.
export { Protocol } from "../../core/protocol.ts";
export { sameService } from "../../core/brain/same-service.ts";
export { sameEndpoint } from "../../core/brain/model/endpoints.ts";
export { errorMessage, invalid, isInvalidArgument, isUnavailable, KpngError, type ErrorCode } from "../../core/errors.ts";
export * from "./family.ts";
export * from "./node-addresses.ts";
export * from "./local-detect.ts";
export * from "./service-port.ts";
export * from "./conntrack.ts";
export * from "./command.ts";
export * from "./names.ts";
export * from "./drift.ts";
