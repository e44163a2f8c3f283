// How pod traffic is told from other traffic (kube-proxy's detectLocalMode),
// as one typed value backends render from. Upstream: cmd/kube-proxy/app
// server_linux.go getLocalDetectors and pkg/proxy/util/localdetector.go.
//
//   ClusterCIDR          source inside detectLocal.clusterCIDRs (--cluster-cidr)
//   NodeCIDR             source inside the Node's spec.podCIDRs (filled in at start-up)
//   BridgeInterface      arriving on detectLocal.bridgeInterface (--pod-bridge-interface)
//   InterfaceNamePrefix  arriving on an interface whose name starts with
//                        detectLocal.interfaceNamePrefix (--pod-interface-name-prefix)
//
// Pod traffic is what is not masqueraded on its way to a cluster IP, and what
// short-circuits to the cluster endpoints of an externalTrafficPolicy=Local
// service's external IPs, LB IPs and node ports.

import { invalid } from "../errors.ts";
import type { KubeProxyConfig } from "./kube-proxy-config.ts";

export type LocalDetect =
  /** source addresses: one CIDR per family at most (kube-proxy keeps the first of each) */
  | { kind: "cluster-cidr" | "node-cidr"; cidrs: string[] }
  /** the input interface's name, exactly */
  | { kind: "bridge"; iface: string }
  /** the input interface's name starts with this */
  | { kind: "prefix"; prefix: string };

/**
 * The detector a kube-proxy document asks for; undefined for ClusterCIDR (the
 * default): backends then use Config.clusterCIDRs. NodeCIDR starts with no
 * CIDRs: start-up fills them from the Node (node-pod-cidrs.ts). An empty
 * interface name is kept here and refused by checkLocalDetect, once flags
 * have had their say.
 */
export function localDetectOf(doc: KubeProxyConfig): LocalDetect | undefined {
  switch (doc.detectLocalMode) {
    case "NodeCIDR":
      return { kind: "node-cidr", cidrs: [] };
    case "BridgeInterface":
      return { kind: "bridge", iface: doc.detectLocal.bridgeInterface };
    case "InterfaceNamePrefix":
      return { kind: "prefix", prefix: doc.detectLocal.interfaceNamePrefix };
    default:
      return undefined;
  }
}

// Linux's dev_valid_name: at most 15 bytes (IFNAMSIZ - 1), no "/", ":" or
// whitespace. Quotes and the wildcards ("*" in nft, "+" in iptables) would
// change what the rule matches, so they are refused too.
const IFNAME = /^[^\s/:"'*+]{1,15}$/;

/**
 * kube-proxy's validateDetectLocalConfiguration: BridgeInterface and
 * InterfaceNamePrefix need a name ("must not be empty"). kpng also refuses a
 * name no Linux interface can have, which would otherwise fail every sync.
 * Throws the one-line error naming the field and its flag.
 */
export function checkLocalDetect(detect: LocalDetect | undefined): void {
  if (detect?.kind === "bridge") checkName(detect.iface, "detectLocal.bridgeInterface", "--pod-bridge-interface", "BridgeInterface");
  if (detect?.kind === "prefix")
    checkName(detect.prefix, "detectLocal.interfaceNamePrefix", "--pod-interface-name-prefix", "InterfaceNamePrefix");
}

function checkName(name: string, field: string, flag: string, mode: string) {
  if (name === "") throw invalid(`${field} (${flag}): must not be empty when detectLocalMode is ${mode}`);
  if (!IFNAME.test(name))
    throw invalid(`${field} (${flag}): "${name}" is not an interface name (1-15 characters, none of whitespace, / : " ' * +)`);
}
