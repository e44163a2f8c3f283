// Who may use the API over TLS: a client certificate signed by the client CA
// (`--listen-tls-ca`), or a Kubernetes ServiceAccount token that the API
// server vouches for (TokenReview, `--listen-token-review`). With neither
// configured, any TLS client is served. The unix socket and plaintext
// loopback listeners are not checked (the socket's mode and the host guard them).
//
// A refused request gets the gRPC status UNAUTHENTICATED (HTTP 401 for the
// Connect protocol) with the reason, one WARN line here, and a count by
// reason. The TLS handshake itself accepts any client certificate so that a
// refusal says why (an expired or foreign certificate) instead of a bare alert.

import type { Logger } from "../../log.ts";
import type { TokenReviewer } from "./token-review.ts";

export const REFUSAL_REASONS = ["no_credentials", "bad_certificate", "token_rejected", "token_review_failed", "tls_handshake"] as const;
export type RefusalReason = (typeof REFUSAL_REASONS)[number];

const HANDSHAKE_LOGS_PER_MINUTE = 10;

export type Verdict = { ok: true; who: string } | { ok: false; reason: RefusalReason; message: string };

/** What is used of a TLS socket. */
export interface PeerSocket {
  readonly authorized?: boolean;
  readonly authorizationError?: unknown;
  readonly remoteAddress?: string;
  getPeerCertificate?(): { subject?: { CN?: string } } | null | undefined;
}

export interface AuthOptions {
  /** a client certificate signed by the client CA lets a request in */
  certificates: boolean;
  /** a bearer token the API server authenticates lets a request in */
  tokens?: TokenReviewer;
}

export class Authenticator {
  /** refusals by reason, for metrics */
  readonly refused: Record<RefusalReason, number> = Object.fromEntries(REFUSAL_REASONS.map((r) => [r, 0])) as Record<RefusalReason, number>;

  constructor(
    private readonly opts: AuthOptions,
    private readonly log: Logger,
  ) {}

  get required(): boolean {
    return this.opts.certificates || !!this.opts.tokens;
  }

  /** Lets the request in or says why not; counts and logs refusals. */
  async check(socket: PeerSocket, authorization: string | undefined): Promise<Verdict> {
    if (!this.required) return { ok: true, who: "anyone" };
    const verdict = await this.decide(socket, authorization);
    if (!verdict.ok) this.refuse(verdict.reason, verdict.message, socket.remoteAddress);
    return verdict;
  }

  /**
   * A TLS handshake that failed before any request: counted like a refusal,
   * logged at most HANDSHAKE_LOGS_PER_MINUTE times a minute (anything that
   * opens the port and hangs up, a scanner or a TCP probe, fails one).
   */
  handshakeFailed(message: string, peer: string | undefined, now = Date.now()): void {
    if (now - this.handshakeLogs.since >= 60_000) this.handshakeLogs = { since: now, lines: 0 };
    const log = ++this.handshakeLogs.lines <= HANDSHAKE_LOGS_PER_MINUTE;
    if (this.handshakeLogs.lines === HANDSHAKE_LOGS_PER_MINUTE)
      message += " (further failed handshakes this minute are counted, not logged)";
    this.refuse("tls_handshake", message, peer, log);
  }

  private handshakeLogs = { since: 0, lines: 0 };

  private refuse(reason: RefusalReason, message: string, peer: string | undefined, log = true) {
    this.refused[reason]++;
    if (log) this.log.warn("refused API client", { peer: peer ?? "", reason, error: message });
  }

  private async decide(socket: PeerSocket, authorization: string | undefined): Promise<Verdict> {
    const { certificates, tokens } = this.opts;
    if (certificates && socket.authorized) return { ok: true, who: `certificate CN=${socket.getPeerCertificate?.()?.subject?.CN ?? ""}` };
    const token = /^Bearer\s+(\S+)$/i.exec(authorization ?? "")?.[1];
    if (token && tokens) {
      const review = await tokens.review(token);
      if (review.ok) return { ok: true, who: review.user };
      return { ok: false, reason: review.failed ? "token_review_failed" : "token_rejected", message: review.message };
    }
    const presented = !!socket.getPeerCertificate?.()?.subject;
    if (certificates && presented) {
      return {
        ok: false,
        reason: "bad_certificate",
        message: `client certificate refused: ${String(socket.authorizationError ?? "not signed by the client CA")}`,
      };
    }
    const ways = [certificates ? "a client certificate signed by the client CA" : "", tokens ? "a ServiceAccount bearer token" : ""]
      .filter(Boolean)
      .join(" or ");
    if (token) return { ok: false, reason: "no_credentials", message: `bearer tokens are not accepted here: ${ways} is required` };
    return { ok: false, reason: "no_credentials", message: `no credentials: ${ways} is required` };
  }
}

/** What is used of the http and http2 compatibility responses. */
interface Res {
  readonly headersSent: boolean;
  writeHead(status: number, headers: Record<string, string>): unknown;
  end(body?: string | Uint8Array): unknown;
}

/**
 * The refusal as the client's protocol says it: gRPC (trailers-only,
 * status 16), a Connect stream's end message, else Connect's unary JSON
 * error with HTTP 401.
 */
export function writeRefusal(contentType: string | undefined, res: Res, message: string): void {
  if (res.headersSent) return void res.end();
  const type = contentType ?? "";
  if (type.startsWith("application/grpc")) {
    res.writeHead(200, { "content-type": type, "grpc-status": "16", "grpc-message": encodeURIComponent(message) });
    return void res.end();
  }
  if (type.startsWith("application/connect+")) {
    const json = Buffer.from(JSON.stringify({ error: { code: "unauthenticated", message } }));
    const head = Buffer.from([2, 0, 0, 0, 0]); // flag 2: the end-of-stream message
    head.writeUInt32BE(json.length, 1);
    res.writeHead(200, { "content-type": type });
    return void res.end(Buffer.concat([head, json]));
  }
  res.writeHead(401, { "content-type": "application/json" });
  res.end(JSON.stringify({ code: "unauthenticated", message }));
}
