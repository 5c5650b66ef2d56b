"""
Usage:
  mu completion bash
  mu completion zsh
  mu completion fish
  mu completion words [--] [<word>...]

Prints the script that has the shell complete mu's command lines: the
verbs, their commands and options, and the names mu knows (agents, tasks,
hosts, plugins, workstreams, harnesses).  Load it where the shell starts:
  bash: source <(mu completion bash)                 in ~/.bashrc
  zsh:  source <(mu completion zsh)                  in ~/.zshrc, after compinit
  fish: mu completion fish | source                  in ~/.config/fish/config.fish
At each Tab the script runs `mu completion words -- <the words typed>`,
which prints the words that may stand at the last one, one a line.
"""

from __future__ import annotations

from typing import Any, Dict

# Each script asks mu at each Tab; mu is looked up on PATH then, as the
# shell runs it, so a script stays right when mu is upgraded.
BASH = r"""# mu's completion for bash: source <(mu completion bash)
_mu_complete() {
    local IFS=$'\n'
    COMPREPLY=($(command mu completion words -- "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null))
}
complete -o default -F _mu_complete mu
"""

ZSH = r"""# mu's completion for zsh: source <(mu completion zsh), after compinit
_mu_complete() {
    local -a found
    found=("${(@f)$(command mu completion words -- "${(@)words[2,CURRENT]}" 2>/dev/null)}")
    found=(${found:#})
    (( ${#found} )) && compadd -Q -- "${found[@]}"
}
compdef _mu_complete mu
"""

FISH = r"""# mu's completion for fish: mu completion fish | source
complete -c mu -f -a '(command mu completion words -- (commandline -opc)[2..-1] (commandline -ct) 2>/dev/null)'
"""

SCRIPTS = {"bash": BASH, "zsh": ZSH, "fish": FISH}


def run(args: Dict[str, Any]) -> int:
    if args["words"]:
        from mu.cli.complete import answer
        from mu.cli.main import GROUPS

        return answer(list(args["<word>"]), GROUPS)
    import sys

    shell = next(name for name in SCRIPTS if args[name])
    sys.stdout.write(SCRIPTS[shell])
    return 0
