// A background duty of every replica (failover, maintenance): one round at a time, every interval, until stopped.

/** Runs `round` every intervalMs after the previous one ended; a failed round goes to onError and the next still runs. */
export class Rounds {
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #stopped = false;

  constructor(
    private readonly round: () => Promise<void>,
    private readonly intervalMs: number,
    private readonly onError: (err: unknown) => void,
  ) {}

  start(): void {
    const loop = () => {
      if (this.#stopped) return;
      this.#running = this.round()
        .catch(this.onError)
        .finally(() => {
          this.#running = undefined;
          if (!this.#stopped) this.#timer = setTimeout(loop, this.intervalMs);
        });
    };
    this.#timer = setTimeout(loop, this.intervalMs);
  }

  /** Resolves once a round in progress has ended; none starts after. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#running;
  }
}
