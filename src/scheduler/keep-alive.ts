import { keepAliveMs } from "./policy.ts";

// How long an idle runner stays loaded: the keep-alive last asked for ("5m", "0", "-1") and the
// timer armed at its idle moment. Apart from runner.ts's state machine, which only says when the
// runner goes idle and when it stops being so.

export class KeepAlive {
  #asked: { text: string; ms: number };
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(text: string) {
    this.#asked = { text, ms: keepAliveMs(text) };
  }

  /** As last asked for. */
  get text(): string {
    return this.#asked.text;
  }

  /** Applies from the next idle moment. */
  set(text: string): void {
    if (text === this.#asked.text) return;
    this.#asked = { text, ms: keepAliveMs(text) };
  }

  /** Idle from now: `expired` at once for "0", after the keep-alive otherwise, never for one that lasts forever. */
  arm(expired: () => void): void {
    const ms = this.#asked.ms;
    if (ms === 0) expired();
    else if (Number.isFinite(ms)) this.timer = setTimeout(expired, ms);
  }

  cancel(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}
