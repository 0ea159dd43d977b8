// `llamadock`: the services as fetch handlers, to serve with any runtime's server or mount in an
// app (docs/library.md). Importing opens, starts and reads nothing; each factory does so when called.

export { createAlbumService } from "./album.ts";
export { createModelRunner } from "./model-runner.ts";
export type { LibraryService, ServiceOptions, Settings } from "./open.ts";
export { ConfigError, loadConfig, type Config, type SettingName } from "./config.ts";
export { mountAt } from "../http/mount.ts";
export type { GuardPolicy } from "../http/guard.ts";
export type { Service } from "../service.ts";
export type { FetchHandler, ListenTarget } from "../runtime/types.ts";
