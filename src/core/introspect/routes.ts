// The introspection service on the API server's router: GetServices
// (services.ts) and Verify (the backends' read-back, given by the process
// that runs them). `kpng serve` runs no backend: Verify names none.

import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import { Introspect, VerifyReplySchema, type BackendSync, type BackendVerify, type Filter } from "../../gen/introspectv1/introspect_pb.ts";
import type { Brain } from "../brain/brain.ts";
import { servicesReplies } from "./services.ts";

/** What the process running the backends tells the introspection service. */
export interface IntrospectSource {
  /** kube-proxy's --nodeport-addresses */
  nodePortAddresses: readonly string[];
  /** what each backend last applied */
  backends(): BackendSync[];
  /** each backend's read-back of the kernel, `service` = "namespace/name" or all */
  verify(service?: string): Promise<BackendVerify[]>;
}

export interface IntrospectRoutesOptions {
  brain: Brain;
  /** the node asked for when the filter names none */
  defaultNodeName: string;
  /** absent in `kpng serve`: no backend runs there */
  source?: IntrospectSource;
}

/**
 * The node whose view is asked. A view lives as long as the brain and is
 * recomputed at every change: a node's kpng serves its own node only (a
 * second view would double its work for good), and a brain (`kpng serve`)
 * only names the cluster has, as for its agents (api/server).
 */
function nodeOf(opts: IntrospectRoutesOptions, filter: Filter): string {
  const node = filter.nodeName || opts.defaultNodeName;
  if (!node) throw new ConnectError("no node name: this kpng has none of its own, name one in the request", Code.InvalidArgument);
  if (opts.source && node !== opts.defaultNodeName)
    throw new ConnectError(
      `this kpng proxies node "${opts.defaultNodeName}" only; ask a kpng serve brain for "${node}"`,
      Code.InvalidArgument,
    );
  if (!opts.source && opts.brain.isSynced && !opts.brain.cluster.nodes.has(node))
    throw new ConnectError(`node "${node}" is not a Node in the cluster`, Code.NotFound);
  return node;
}

export function introspectRoutes(opts: IntrospectRoutesOptions) {
  return (router: ConnectRouter) =>
    router.service(Introspect, {
      getServices: (filter) =>
        servicesReplies(
          {
            brain: opts.brain,
            nodeName: nodeOf(opts, filter),
            nodePortAddresses: opts.source?.nodePortAddresses ?? [],
            backends: () => opts.source?.backends() ?? [],
          },
          filter,
        ),
      async verify(filter) {
        if (filter.name && !filter.namespace) throw new ConnectError("a Service name needs its namespace", Code.InvalidArgument);
        const service = filter.namespace && filter.name ? `${filter.namespace}/${filter.name}` : undefined;
        return create(VerifyReplySchema, { backends: opts.source ? await opts.source.verify(service) : [] });
      },
    });
}
