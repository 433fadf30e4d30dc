# bash completion for the hatchery CLI. What may come next is the CLI's own answer
# (`hatchery __complete WORDS… CURRENT`): commands, forms and options from its command
# table, runner, host and pool names from the running hatcheryd. Installed as
# /usr/share/bash-completion/completions/hatchery.

_hatchery() {
  local cur=${COMP_WORDS[COMP_CWORD]} line files=
  COMPREPLY=()
  while IFS= read -r line; do
    if [ "$line" = :files ]; then files=1; else COMPREPLY+=("$line"); fi
  done < <(command hatchery __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null)
  if [ -n "$files" ]; then
    local f
    while IFS= read -r f; do COMPREPLY+=("$f"); done < <(compgen -f -- "$cur")
  fi
}
complete -F _hatchery hatchery
