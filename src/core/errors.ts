// One error type for kpng, with a closed set of codes. Messages name the
// object and the field: `[invalid_argument] service default/web ports[http].port: 70000 is out of range`.

export type ErrorCode =
  | "invalid_argument" // bad input: file, object, flag or config field
  | "not_found"
  | "unavailable" // a kernel feature or a peer is missing
  | "failed_precondition"
  | "internal";

export class KpngError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
  ) {
    super(`[${code}] ${message}`);
    this.name = "KpngError";
  }
}

export const invalid = (message: string) => new KpngError("invalid_argument", message);

export const isInvalidArgument = (err: unknown): err is KpngError => err instanceof KpngError && err.code === "invalid_argument";

export const isUnavailable = (err: unknown): err is KpngError => err instanceof KpngError && err.code === "unavailable";

export const errorMessage = (err: unknown): string => (err instanceof Error ? err.message : String(err));
