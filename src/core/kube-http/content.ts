// Content types with the API server, as client-go negotiates them for
// kube-proxy: its clientConnection.contentType (default
// application/vnd.kubernetes.protobuf, the --kube-api-content-type flag) and
// acceptContentTypes set the Accept header of every GET (client-go's rest
// client: acceptContentTypes if set, else `contentType, */*`); the answer is
// read by the Content-Type it carries, so a server (or a kind) that answers
// JSON is read as JSON whatever was asked. Writes (Event POSTs) stay JSON:
// the API server takes JSON for every kind, and kpng writes little.

export const JSON_TYPE = "application/json";
export const PROTOBUF_TYPE = "application/vnd.kubernetes.protobuf";

/** the media types kpng reads */
const readable = new Set([JSON_TYPE, PROTOBUF_TYPE]);

export type Encoding = "json" | "protobuf";

/** `application/vnd.kubernetes.protobuf;stream=watch` -> the media type, lowercased, without parameters */
export const mediaType = (header: string | undefined) => (header ?? "").split(";")[0].trim().toLowerCase();

/** How an answer with this Content-Type is read; an absent one is JSON (what every API server has always sent). */
export function encodingOf(contentType: string | undefined): Encoding | null {
  const t = mediaType(contentType);
  if (t === "" || t === JSON_TYPE) return "json";
  if (t === PROTOBUF_TYPE) return "protobuf";
  return null;
}

/** Why kpng cannot use `value` as clientConnection.contentType, or null. */
export function contentTypeProblem(value: string): string | null {
  return readable.has(mediaType(value)) ? null : `kpng reads ${JSON_TYPE} and ${PROTOBUF_TYPE} only`;
}

/** Why kpng cannot use `value` as clientConnection.acceptContentTypes (a comma-separated Accept list), or null. */
export function acceptProblem(value: string): string | null {
  if (value === "") return null;
  const types = value.split(",").map((t) => mediaType(t));
  const bad = types.find((t) => !readable.has(t) && t !== "*/*");
  if (bad !== undefined) return `${JSON.stringify(bad)}: kpng reads ${JSON_TYPE} and ${PROTOBUF_TYPE} only`;
  // */* alone lets the server pick any type it has, YAML and CBOR included
  if (!types.some((t) => readable.has(t))) return `names no type kpng reads (${JSON_TYPE}, ${PROTOBUF_TYPE})`;
  return null;
}

/** The Accept header client-go's rest client sends for this clientConnection. */
export function acceptHeader(conn: { contentType: string; acceptContentTypes: string }): string {
  if (conn.acceptContentTypes) return conn.acceptContentTypes;
  return `${conn.contentType || JSON_TYPE}, */*`;
}
