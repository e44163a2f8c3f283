// The one typed, validated configuration passed down from the CLI. Flags and
// the kube-proxy configuration file (see config-file.ts) both end up here;
// nothing else reads flags or the environment.

export interface Config {
  /** the node this proxy programs (`--hostname-override` / `--node-name`) */
  nodeName: string;
  /** node IPs used for NodePorts when `nodePortAddresses` is empty, one per family at most */
  nodeIPs: string[];
  /** CIDRs (or the keyword "primary") whose addresses answer NodePorts; empty = the node's primary IPs */
  nodePortAddresses: string[];
  /** pod CIDRs: traffic from outside them to a service IP is masqueraded */
  clusterCIDRs: string[];
  masqueradeAll: boolean;
  /** fwmark bit used to mark packets for masquerade (kube-proxy's --iptables-masquerade-bit) */
  masqueradeBit: number;
  /** `--service-proxy-name`: serve services labelled with this name (and unlabelled ones: only when empty) */
  serviceProxyName: string;
  syncPeriodSeconds: number;
  minSyncPeriodSeconds: number;
  /** backends print what they would apply instead of applying it */
  dryRun: boolean;
  ipvs: { scheduler: string; syncPeriodSeconds: number; minSyncPeriodSeconds: number };
  winkernel: { sourceVip: string; networkName: string; enableDSR: boolean };
  conntrack: { udpTimeoutSeconds: number };
  healthzBindAddress: string;
  metricsBindAddress: string;
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
    minSyncPeriodSeconds: 1,
    dryRun: false,
    ipvs: { scheduler: "rr", syncPeriodSeconds: 30, minSyncPeriodSeconds: 0 },
    winkernel: { sourceVip: "", networkName: "", enableDSR: false },
    conntrack: { udpTimeoutSeconds: 0 },
    healthzBindAddress: "0.0.0.0:10256",
    metricsBindAddress: "127.0.0.1:10249",
    ...overrides,
  };
}
