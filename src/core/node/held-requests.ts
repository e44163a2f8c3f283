// API requests reported before the metrics exist: the run command starts its
// lists before its metrics server (src/main.ts), and what they report in
// between (a request refused at once) must still be counted.

import type { RestClientObserver, RestClientRequest } from "./client-metrics.ts";

/** Holds what is reported until `attach`, then hands it over and forwards. */
export class HeldRestClient implements RestClientObserver {
  private held: RestClientRequest[] = [];
  private to?: RestClientObserver;

  request(r: RestClientRequest): void {
    if (this.to) this.to.request(r);
    else this.held.push(r);
  }

  attach(to: RestClientObserver): void {
    this.to = to;
    for (const r of this.held) to.request(r);
    this.held = [];
  }
}
