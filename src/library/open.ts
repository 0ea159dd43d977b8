import { buildServices } from "../app.ts";
import { ConfigError, loadConfig, type Config } from "../config.ts";
import { guard } from "../http/guard.ts";
import { detectRuntime } from "../runtime/index.ts";
import type { FetchHandler } from "../runtime/types.ts";
import type { Service } from "../service.ts";
import { settingNames, type SettingName } from "../settings.ts";

// What the library's factories share: settings read as the server reads them, the services built
// by the server's own wiring (src/app.ts), and the handler put behind the guard it has on TCP.

/** Settings by their names in docs/configuration.md, as strings (`{ PHOTOS_API_TIMEOUT_MS: "2000" }`). */
export type Settings = Partial<Record<SettingName, string>>;

export type ServiceOptions = {
  /** Settings by name; a name the configuration does not know is refused (a typo would be lost). Unset: defaults. */
  settings?: Settings;
  /**
   * An environment to read settings from as the server does (`process.env`): names it does not
   * know are ignored, Docker Model Runner's names are taken. `settings` win over it. Default: none.
   */
  env?: Record<string, string | undefined>;
};

/** A service to serve or mount: the server's service, with its guarded handler and no-op defaults. */
export type LibraryService = Required<Pick<Service, "drain" | "stop">> & Service & {
  /** The configuration it was built with (its defaults filled in). */
  config: Config;
  /**
   * The handler behind the guard of its TCP listener (Host, Origin, API keys as configured): what
   * an app mounts or a runtime serves. `handler` is the same routes without the guard.
   */
  fetch: FetchHandler;
};

export async function openService(name: "album" | "runner", options: ServiceOptions): Promise<LibraryService> {
  const settings = options.settings ?? {};
  const unknown = Object.keys(settings).filter((key) => !settingNames.includes(key));
  if (unknown.length) throw new ConfigError(`unknown setting(s): ${unknown.join(", ")}`);
  const config = loadConfig({ ...options.env, ...settings, SERVICES: name }, []);
  // SERVICES is this one: one service comes back, with its TCP target first (src/app.ts).
  const [service] = (await buildServices(config, await detectRuntime())) as [Service];
  const [tcp] = service.targets;
  return {
    drain: async () => {},
    stop: async () => {},
    ...service,
    config,
    fetch: guard(service.handler, tcp!, service.policy),
  };
}
