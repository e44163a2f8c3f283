// A valibot issue as the second half of kpng's one-line errors: the field,
// written as in the file (`spec.ports[0].port`, `users[1].user.exec.command`),
// and what is wrong with the value found there (`70000 is out of range`).

import type * as v from "valibot";

/** The keys to an issue's value: strings for object keys, numbers for array indices. */
export function issueKeys(issue: v.BaseIssue<unknown>): Array<string | number> {
  return (issue.path ?? []).map((item) => (item.type === "array" ? Number(item.key) : String(item.key)));
}

/** Object keys joined by dots, array indices in brackets; "" for the document itself. */
export function fieldPath(keys: ReadonlyArray<string | number>): string {
  let out = "";
  for (const k of keys) out += typeof k === "number" ? `[${k}]` : out ? `.${k}` : k;
  return out;
}

export const issuePath = (issue: v.BaseIssue<unknown>): string => fieldPath(issueKeys(issue));

/**
 * The value (scalars only: a whole mapping would not fit on the line) and the
 * schema's message. A required key that is absent comes as an issue of the
 * object holding it, with the object's message: say "missing" instead.
 */
export function issueProblem(issue: v.BaseIssue<unknown>): string {
  if (issue.input === undefined && issue.path?.at(-1)?.origin === "key") return "missing";
  const shown = typeof issue.input === "object" && issue.input !== null ? "" : `${JSON.stringify(issue.input)} `;
  return `${shown}${issue.message}`;
}
