# fish completion for the hatchery CLI. What may come next is the CLI's own answer
# (`hatchery __complete WORDS… CURRENT`): commands, forms and options from its command
# table, runner, host and pool names from the running hatcheryd. Installed as
# /usr/share/fish/vendor_completions.d/hatchery.fish.

function __hatchery_complete
    set -l words (commandline -opc)
    set -e words[1]
    set -l current (commandline -ct)
    set -l candidates (command hatchery __complete $words "$current" 2>/dev/null)
    if test "$candidates[1]" = ":files"
        set -e candidates[1]
        __fish_complete_path "$current"
    end
    printf '%s\n' $candidates
end

complete -c hatchery -f -a '(__hatchery_complete)'
