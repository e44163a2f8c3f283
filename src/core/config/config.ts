// The one typed, validated configuration passed down from the CLI. Flags and
// the kube-proxy configuration file (see config-file.ts) both end up here;
// nothing else reads flags or the environment.

import type { LocalDetect } from "./detect-local.ts";
import { defaultKubeProxyConfig, type KubeProxyConfig } from "./kube-proxy-config.ts";

export type { LocalDetect };

export interface Config {
  /** the node this proxy programs (`--hostname-override` / `--node-name`) */
  nodeName: string;
  /**
   * The operator's node IPs (`--node-ip` / `--bind-address`, nodeIPOverride),
   * one per family at most; empty = the Node's addresses. The IPs backends
   * render with are NodeState.nodeIPs (brain/node-ips.ts), kept current by the
   * brain; this field alone reaches only sidecars (the wire does not carry them).
   */
  nodeIPs: string[];
  /** CIDRs (or the keyword "primary") whose addresses answer NodePorts; empty = the node's primary IPs */
  nodePortAddresses: string[];
  /** pod CIDRs: traffic from outside them to a service IP is masqueraded (detectLocalMode ClusterCIDR, the default) */
  clusterCIDRs: string[];
  /**
   * detectLocalMode other than ClusterCIDR (detect-local.ts): how backends
   * tell pod traffic instead of clusterCIDRs. Absent = ClusterCIDR.
   */
  localDetect?: LocalDetect;
  masqueradeAll: boolean;
  /** fwmark bit used to mark packets for masquerade (kube-proxy's --iptables-masquerade-bit) */
  masqueradeBit: number;
  /** `--service-proxy-name`: serve services labelled with this name (and unlabelled ones: only when empty) */
  serviceProxyName: string;
  syncPeriodSeconds: number;
  /** kube-proxy's minSyncPeriod when an operator sets one; 0 = none: syncs are paced by their cost (pacing.ts) */
  minSyncPeriodSeconds: number;
  /** backends print what they would apply instead of applying it */
  dryRun: boolean;
  ipvs: {
    scheduler: string;
    syncPeriodSeconds: number;
    minSyncPeriodSeconds: number;
    /** kube-proxy's ipvs fields, applied as upstream's ipvs proxier does (plugins/ipvs/settings.ts) */
    excludeCIDRs?: string[];
    strictARP?: boolean;
    tcpTimeoutSeconds?: number;
    tcpFinTimeoutSeconds?: number;
    udpTimeoutSeconds?: number;
  };
  /**
   * iptables.localhostNodePorts (kube-proxy's v1alpha1 default: true): the
   * iptables backend answers IPv4 node ports on 127.0.0.1 (route_localnet and
   * its guard rule); absent = off. nft never does, as upstream's nftables mode.
   */
  iptables?: { localhostNodePorts: boolean };
  winkernel: { sourceVip: string; networkName: string; enableDSR: boolean };
  conntrack: { udpTimeoutSeconds: number };
  /** ebpf backend: cgroup v2 directory to attach to ("" = the hierarchy's root), bpffs directory of its pins */
  ebpf: { cgroup: string; pinDir: string };
  /** userspace backend: how clients reach its relays ("bind": on the service IPs themselves; "redirect": nftables redirect) */
  userspaceMode: "bind" | "redirect";
  /** address:port for /healthz and /livez; "" = off */
  healthzBindAddress: string;
  /** address:port for /metrics and /proxyMode; "" = off */
  metricsBindAddress: string;
  /** kubeconfig file (`--kubeconfig` or the file's clientConnection.kubeconfig); "" = in-cluster */
  kubeconfig: string;
  /** `-v` / logging.verbosity and `--logging-format` / logging.format */
  logging?: { format: "text" | "json"; verbosity: number };
  /** the built-in backend to run when no --backend is given ("" = kube-proxy's default: iptables on Linux); from the file's `mode` */
  mode: string;
  /**
   * The effective kube-proxy configuration document (v1alpha2 layout): the
   * file's content with explicit kube-proxy flags applied. `--write-config-to`
   * writes it; fields kpng does not act on are carried so a migration loses nothing.
   */
  kubeProxy: KubeProxyConfig;
}

export function defaultConfig(overrides: Partial<Config> = {}): Config {
  return {
    nodeName: "",
    nodeIPs: [],
    nodePortAddresses: [],
    clusterCIDRs: [],
    masqueradeAll: false,
    masqueradeBit: 14,
    serviceProxyName: "",
    syncPeriodSeconds: 30,
    minSyncPeriodSeconds: 0,
    dryRun: false,
    ipvs: { scheduler: "rr", syncPeriodSeconds: 30, minSyncPeriodSeconds: 0 },
    winkernel: { sourceVip: "", networkName: "", enableDSR: false },
    conntrack: { udpTimeoutSeconds: 0 },
    ebpf: { cgroup: "", pinDir: "/sys/fs/bpf/kpng" },
    userspaceMode: "bind",
    healthzBindAddress: "0.0.0.0:10256",
    metricsBindAddress: "127.0.0.1:10249",
    kubeconfig: "",
    mode: "",
    kubeProxy: defaultKubeProxyConfig(),
    ...overrides,
  };
}
