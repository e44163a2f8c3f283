// Bearer tokens checked by the API server (a TokenReview), as kube-rbac-proxy
// and the kubelet do: a brain has API access, its agents need none. The
// token must be a projected ServiceAccount token for the audience "kpng"
// (so a token an agent sends cannot be replayed against the API server, and
// an ordinary pod token is not accepted), of one of the allowed users.
// Answers are cached briefly: 1,000 agents reconnecting at once cost one
// review per distinct token, not per connection.

import { createHash } from "node:crypto";
import * as v from "valibot";
import { errorMessage } from "../../errors.ts";
import { issuePath, issueProblem } from "../../valibot-issues.ts";
import { expectOK, readBody, type KubeRequest } from "../../kube-http/request.ts";

export const TOKEN_AUDIENCE = "kpng";

export type Review = { ok: true; user: string } | { ok: false; failed: boolean; message: string };

export interface TokenReviewer {
  review(token: string): Promise<Review>;
}

export interface TokenReviewOptions {
  request: KubeRequest;
  /** usernames let in, e.g. system:serviceaccount:kube-system:kpng-agent */
  users: readonly string[];
  /** how long an answer is kept: accepted (default 60 s), refused or failed (default 5 s) */
  acceptedMs?: number;
  refusedMs?: number;
  now?: () => number;
}

const TokenReviewStatus = v.object({
  status: v.object({
    authenticated: v.optional(v.boolean()),
    user: v.optional(v.object({ username: v.optional(v.string()) })),
    error: v.optional(v.string()),
  }),
});

const REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews";
const MAX_CACHED = 10_000;

export function tokenReviewer(opts: TokenReviewOptions): TokenReviewer {
  const now = opts.now ?? Date.now;
  const acceptedMs = opts.acceptedMs ?? 60_000;
  const refusedMs = opts.refusedMs ?? 5_000;
  const users = new Set(opts.users);
  const cache = new Map<string, { until: number; answer: Promise<Review> }>();

  async function ask(token: string): Promise<Review> {
    let text: string;
    try {
      const res = await opts.request({
        method: "POST",
        path: REVIEW_PATH,
        body: { apiVersion: "authentication.k8s.io/v1", kind: "TokenReview", spec: { token, audiences: [TOKEN_AUDIENCE] } },
        signal: AbortSignal.timeout(10_000),
      });
      text = await readBody(await expectOK(res, [200, 201]));
    } catch (err) {
      return { ok: false, failed: true, message: `token review failed: ${errorMessage(err)}` };
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      return { ok: false, failed: true, message: "token review failed: the API server's answer is not JSON" };
    }
    const parsed = v.safeParse(TokenReviewStatus, json);
    if (!parsed.success)
      return {
        ok: false,
        failed: true,
        message: `token review failed: TokenReview ${issuePath(parsed.issues[0])}: ${issueProblem(parsed.issues[0])}`,
      };
    const { authenticated, user, error } = parsed.output.status;
    if (!authenticated) return { ok: false, failed: false, message: `token rejected by the API server${error ? `: ${error}` : ""}` };
    const name = user?.username ?? "";
    if (!users.has(name))
      return { ok: false, failed: false, message: `token of "${name}" is not allowed (allowed: ${[...users].join(", ")})` };
    return { ok: true, user: name };
  }

  return {
    review(token) {
      const key = createHash("sha256").update(token).digest("base64");
      const t = now();
      const hit = cache.get(key);
      if (hit && hit.until > t) return hit.answer;
      if (cache.size >= MAX_CACHED) for (const [k, e] of cache) if (e.until <= t) cache.delete(k);
      const entry = { until: t + refusedMs, answer: ask(token) };
      cache.set(key, entry);
      void entry.answer.then((r) => {
        if (r.ok) entry.until = now() + acceptedMs;
      });
      return entry.answer;
    },
  };
}
