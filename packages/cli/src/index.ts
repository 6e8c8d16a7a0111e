// @sandglass/cli: the `sandglass` command line, built on @sandglass/sdk only.
export { buildProgram, type RunState } from './program.js';
export { collectEnv, collectMetadata, parseCpEndpoint, parseForkArg, parseTime, planCp, UsageError, type CpEndpoint, type CpPlan } from './args.js';
