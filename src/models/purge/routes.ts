import type { Route } from "../../http/router.ts";
import type { ModelStore } from "../store/store.ts";
import { parseAge, purge, type DeleteModel } from "./purge.ts";

// `DELETE /models/purge`: every model, as Docker Model Runner's (whose clients read only the
// status); `?unused=true[&older-than=1h]` only what nothing uses (see purge.ts). Both answer what
// they removed and the bytes freed.

/** Incomplete downloads younger than this are kept by default: a pull may resume from them. */
export const DEFAULT_INCOMPLETE_AGE = "1h";

export function purgeRoute(store: ModelStore, deleteModel: DeleteModel): Route {
  return {
    method: "DELETE",
    path: "/models/purge",
    handle: async (request) => {
      const query = new URL(request.url).searchParams;
      const all = query.get("unused") !== "true";
      const incompleteOlderThanMs = parseAge(query.get("older-than") ?? DEFAULT_INCOMPLETE_AGE);
      return Response.json(await purge(store, { all, incompleteOlderThanMs }, deleteModel));
    },
  };
}
