// What client-go and component-base export in every Kubernetes component,
// under their names, labels and buckets:
// - rest_client_requests_total{code,method,host} and
//   rest_client_request_duration_seconds{verb,host}
//   (component-base/metrics/prometheus/restclient), for kpng's API client;
// - kubernetes_build_info (component-base/metrics/prometheus/version).

import type { RestClientObserver, RestClientRequest } from "../kube-http/access.ts";
import { type VersionInfo, versionInfo } from "../version.ts";
import { Counter, Gauge, Histogram, type Registry } from "prom-client";

/** client-go's request latency buckets (seconds) */
export const REST_CLIENT_BUCKETS = [0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60];

export class RestClientMetrics implements RestClientObserver {
  private readonly requests: Counter;
  private readonly latency: Histogram;

  constructor(registers: Registry[]) {
    this.requests = new Counter({
      name: "rest_client_requests_total",
      help: "Number of HTTP requests, partitioned by status code, method, and host.",
      labelNames: ["code", "method", "host"],
      registers,
    });
    this.latency = new Histogram({
      name: "rest_client_request_duration_seconds",
      help: "Request latency in seconds. Broken down by verb, and host.",
      labelNames: ["verb", "host"],
      buckets: REST_CLIENT_BUCKETS,
      registers,
    });
  }

  request(r: RestClientRequest): void {
    this.requests.inc({ code: r.code, method: r.method, host: r.host });
    if (r.seconds !== undefined) this.latency.observe({ verb: r.method, host: r.host }, r.seconds);
  }
}

/**
 * kubernetes_build_info with kpng's version.Info (src/core/version.ts):
 * go_version and compiler name the runtime that runs kpng (Bun), in the fields
 * where Go components name theirs; the commit, tree state and build date are
 * the build's stamp ("unknown" run from source).
 */
export function buildInfoLabels(v: VersionInfo = versionInfo()): Record<string, string> {
  return {
    major: v.major,
    minor: v.minor,
    git_version: v.gitVersion,
    git_commit: v.gitCommit,
    git_tree_state: v.gitTreeState,
    build_date: v.buildDate,
    go_version: v.runtime,
    compiler: v.compiler,
    platform: v.platform,
  };
}

export function registerBuildInfo(registers: Registry[]): void {
  const labels = buildInfoLabels();
  const g = new Gauge({
    name: "kubernetes_build_info",
    help: "A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running.",
    labelNames: Object.keys(labels),
    registers,
  });
  g.set(labels, 1);
}
