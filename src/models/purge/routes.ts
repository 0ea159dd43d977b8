import type { Route } from "../../http/router.ts";
import type { ModelStore } from "../store/store.ts";
import { parseAge, purge, type DeleteModel } from "./purge.ts";

// `DELETE /models/purge`: every model, as Docker Model Runner's (whose clients read only the
// status); `?unused=true[&older-than=1h]` only what nothing uses (see purge.ts). Both answer what
// they removed and the bytes freed.

/** Incomplete downloads younger than this are kept by default: a pull may resume from them. */
export const DEFAULT_INCOMPLETE_AGE = "1h";

/** What a purge frees besides the models' store (the engine store's builds and leftovers). */
export type AlsoPurge = (all: boolean) => Promise<{ removed: string[]; files: number; bytes: number }>;

export function purgeRoute(store: ModelStore, deleteModel: DeleteModel, alsoPurge?: AlsoPurge): Route {
  return {
    method: "DELETE",
    path: "/models/purge",
    handle: async (request) => {
      const query = new URL(request.url).searchParams;
      const all = query.get("unused") !== "true";
      const incompleteOlderThanMs = parseAge(query.get("older-than") ?? DEFAULT_INCOMPLETE_AGE);
      const report = await purge(store, { all, incompleteOlderThanMs }, deleteModel);
      const also = await alsoPurge?.(all);
      if (!also) return Response.json(report);
      return Response.json({ ...report, removed_files: report.removed_files + also.files, freed_bytes: report.freed_bytes + also.bytes, engines_removed: also.removed });
    },
  };
}
