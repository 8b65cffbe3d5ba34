/** `cuda-memory help [command]`: the program's help, or one command's; an unknown one is a usage error. */
import { Command } from 'commander';
import { Usage } from './common';

export function register(program: Command): void {
  program.helpCommand(false);
  program
    .command('help')
    .description('show help for a command, or list the commands')
    .argument('[command]', 'the command to explain')
    .action((name: string | undefined) => {
      if (name === undefined) {
        program.outputHelp();
      } else {
        const sub = program.commands.find((c) => c.name() === name || c.aliases().includes(name));
        if (!sub || sub.name() === 'help')
          throw new Usage(
            `help: no command ${JSON.stringify(name)}; the commands are ${program.commands
              .map((c) => c.name())
              .filter((n) => n !== 'help')
              .join(', ')}`,
          );
        sub.outputHelp();
      }
      process.exitCode = 0;
    });
}
