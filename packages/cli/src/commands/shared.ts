// What every command module shares: the exit status the actions leave for main, and how an action is wrapped.
import type { SandboxInfo } from '@sandglass/sdk';

/** What the actions leave for main: the exit status. */
export interface RunState {
  exitCode: number;
}

/** Wraps an action so that its result (an exit status, or nothing for 0) lands in the RunState. */
export type Act = <A extends unknown[]>(fn: (...args: A) => Promise<number | void>) => (...args: A) => Promise<void>;

export const actFor =
  (state: RunState): Act =>
  (fn) =>
  async (...args) => {
    state.exitCode = (await fn(...args)) ?? 0;
  };

/** A sandbox without the access grant of the answers that start one: that is a credential and stays out of the output. */
export const withoutAccess = ({ access: _, ...info }: SandboxInfo): Omit<SandboxInfo, 'access'> => info;
