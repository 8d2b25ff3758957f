# Sourced (BASH_ENV) by the shell of every Bash tool call, in that shell itself,
# before its command runs: the shell and everything it starts are the OOM killer's
# first choice, so the runner (their parent, which reports what happened) is not.
# Set here, in the child, never raised around the fork in the runner: that left a
# window in which the runner itself carried the highest score.
{ echo 1000 >/proc/self/oom_score_adj; } 2>/dev/null
unset BASH_ENV
