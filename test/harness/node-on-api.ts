// Where the whole-process suites that run kpng inside a node against the real
// kube-apiserver start from (test/deployed/*-real, test/userspace/own-routes-real):
// a topology, a scratch folder, the shared API server reached from inside the
// node, and the Node registered with its address, as the kubelet would have.

import { join } from "node:path";
import { node } from "../fixtures/k8s.ts";
import { tempDir } from "./kpng-process.ts";
import { apiForNode, type KubeApiServer } from "./kube-apiserver.ts";
import { createTopology, type Topology } from "./netns.ts";

/**
 * A node namespace following the shared API server. Made in start() (in
 * beforeAll), so a suite a filter skips makes nothing; close() undoes the
 * parts that were made, also after a start() that failed half-way.
 */
export class NodeOnApi {
  topo!: Topology;
  api!: KubeApiServer;
  /** the kubeconfig kpng in the node reads: the API server at 127.0.0.1:6443 inside the node */
  kubeconfig = "";
  readonly dir: ReturnType<typeof tempDir>;
  private unreach?: () => Promise<unknown>;

  constructor(private readonly opts: { pods: number; prefix: string; node: string; dirPrefix: string }) {
    this.dir = tempDir(opts.dirPrefix);
  }

  async start(): Promise<this> {
    this.topo = await createTopology({ pods: this.opts.pods, prefix: this.opts.prefix });
    this.dir.create();
    const reached = await apiForNode(this.topo.node.ns, join(this.dir.path, "kubeconfig"));
    this.unreach = reached.stop;
    ({ api: this.api, kubeconfig: this.kubeconfig } = reached);
    // kpng waits for its Node's addresses before the first sync (node ports need them)
    await this.api.apply(node(this.opts.node, { ips: [this.topo.node.v4] }));
    return this;
  }

  async close(): Promise<void> {
    await this.unreach?.();
    await this.topo?.destroy();
    this.dir.remove();
  }
}
