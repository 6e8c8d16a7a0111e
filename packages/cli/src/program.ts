// The `sandglass` command line: the program and its command groups, one module each under commands/.
import { readFileSync } from 'node:fs';
import { Command } from 'commander';
import { registerApiKeyCommands } from './commands/api-keys.js';
import { registerNodeCommands } from './commands/nodes.js';
import { registerKeyCommands } from './commands/keys.js';
import { registerAuditCommand, registerAuditKeyCommand } from './commands/audit.js';
import { registerReplayCommand } from './commands/replay.js';
import { registerControlPlaneCommand } from './commands/control-plane.js';
import { registerApprovalCommands, registerNetworkCommands, registerSecretCommands } from './commands/egress.js';
import { registerEventCommands } from './commands/events.js';
import { registerGatewayCommand } from './commands/gateway.js';
import { registerGuestCommands } from './commands/guest.js';
import { registerMcpCommand } from './commands/mcp.js';
import { registerPortCommands } from './commands/ports.js';
import { registerSandboxCommands } from './commands/sandboxes.js';
import { registerServerCommands } from './commands/server.js';
import { registerTemplateCommands } from './commands/templates.js';
import { actFor, type RunState } from './commands/shared.js';
import { registerTimeTravelCommands } from './commands/time-travel.js';

export type { RunState };

/** The release, from the repository's package.json: three levels up from src/ and from the compiled dist/ alike. */
export function cliVersion(): string {
  return (JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
}

export function buildProgram(state: RunState): Command {
  const program = new Command('sandglass')
    .description('Sandglass: disposable Linux sandboxes for AI agents')
    .version(cliVersion(), '-V, --version', 'print the version and exit')
    .showHelpAfterError('(run with --help for usage)')
    // A group's options stop at its subcommand, so `events verify … --json` is verify's flag, not the `events` listing's.
    .enablePositionalOptions()
    // Usage errors exit 2 (main maps commander's errors); actions report their own exit status.
    .exitOverride();
  const act = actFor(state);
  // In this order in --help.
  registerServerCommands(program, act);
  registerControlPlaneCommand(program, act);
  registerGatewayCommand(program, act);
  registerSandboxCommands(program, act);
  registerTemplateCommands(program, act);
  registerGuestCommands(program, act);
  registerPortCommands(program, act);
  registerEventCommands(program, act);
  registerAuditCommand(program, act);
  registerReplayCommand(program, act);
  registerTimeTravelCommands(program, act);
  registerNetworkCommands(program, act);
  registerSecretCommands(program, act);
  registerApiKeyCommands(program, act);
  registerNodeCommands(program, act);
  registerKeyCommands(program, act);
  registerApprovalCommands(program, act);
  registerMcpCommand(program, act);
  // Last: it joins the `keys` group wherever that was made.
  registerAuditKeyCommand(program, act);
  return program;
}
