// `llamadock/config`: the server's configuration, read from an environment and command line.

export { ConfigError, envNames, loadConfig, propertyToEnv, settingNames, type Config } from "../config.ts";
export type { SettingName } from "../settings.ts";
