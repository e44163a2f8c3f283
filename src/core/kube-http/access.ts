// What a request to the API server needs (the server, how its certificate
// is checked, the credentials to send) and where it is reported. Declared
// here, in the Kubernetes HTTP client's own room, so the client is a leaf:
// the kubeconfig loader (sources/kubeconfig.ts) fills these in, and the
// metrics (node/client-metrics.ts) are handed in as a RestClientObserver
// instead of being imported by the client or the sources.

/** How the API server's certificate is checked. */
export interface ServerTLS {
  /** PEM bundle of the cluster CA; absent: the system's roots */
  ca?: string;
  /** the name the certificate must carry, when it is not the server URL's host (tls-server-name) */
  servername?: string;
  /** insecure-skip-tls-verify */
  insecure: boolean;
}

/** What one request carries (sources/kube-credentials.ts picks them as client-go does). */
export interface Credentials {
  /** the Authorization header: `Bearer …` or `Basic …` */
  authorization?: string;
  /** PEM client certificate and its key */
  cert?: string;
  key?: string;
  /** the API server refused these (401): a cached exec credential is dropped so the next request runs the plugin again */
  refused(): void;
}

export type CredentialSource = () => Promise<Credentials>;

/** One API request as the metrics see it. */
export interface RestClientRequest {
  method: string;
  host: string;
  /** the HTTP status, or "<error>" when no response came (client-go's value) */
  code: string;
  /** from sending to the whole answer; absent for a watch, which client-go counts but does not time */
  seconds?: number;
}

/** What an API request reports once it is answered (or failed): rest_client_* metrics, in node/client-metrics.ts. */
export interface RestClientObserver {
  request(r: RestClientRequest): void;
}

/** Everything a request to the API server needs. */
export interface KubeAccess {
  /** the API server's URL, without a trailing slash: request paths are appended */
  server: string;
  tls: ServerTLS;
  /** for the next request: token files re-read, exec credentials cached until they expire */
  credentials: CredentialSource;
  /** where requests are reported (rest_client_* metrics); none = not reported */
  observe?: RestClientObserver;
}
