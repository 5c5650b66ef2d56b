"""The shell that runs on the host: one POSIX sh program per operation.

Each program is sent as the argument of `sh -c` (so the login shell only
has to parse one single-quoted word and a few plain ones), with the work
folder as its first argument; its data (a script, a job's run file) comes
over stdin.  A program answers on stdout in words the plugin parses
(`link`, `job`, `channel`), never in the exit status, which the command
that reaches the host shares with its own failures (ssh's 255).

What the host needs: a POSIX sh, `mkdir`, `cat`, `head -c`, `grep -a`,
`sed`, `mv`; git for fetch and push, tmux for jobs; `setsid` and `/proc`
(Linux) for the proofs that a run is gone: without them the plugin still
kills the run's process group but cannot find a process that left it.

How a run is found: everything a script or a job starts carries a token in
its environment (`MU_SSH_RUN=<token>` for a link run, `MU_SSH_JOB=<token>`
for a job), which every descendant inherits, even one that left the run's
process group; `mu_sweep` SIGKILLs every process whose environment holds
it until none is left (a zombie's environment reads empty: it runs nothing).
"""

from __future__ import annotations

RUN_VAR = "MU_SSH_RUN"
JOB_VAR = "MU_SSH_JOB"
TRAILER = "\x1emu-ssh:"  # the exec bootstrap's last stderr line: \036mu-ssh:<token>:<what>

PRELUDE = r'''
W=$1; shift
case $W in /*) ;; *) W=${HOME:?HOME is not set on the host}/$W ;; esac
mu_left() {
  for mu_f in $(grep -l -a -s -F -e "$1=$2" /proc/[0-9]*/environ 2>/dev/null); do
    mu_f=${mu_f#/proc/}; printf '%s\n' "${mu_f%/environ}"
  done
}
mu_sweep() {
  # the common case first: nothing left, known from one grep that stops
  # at the first match (no command substitution, no fork of our own)
  grep -q -a -s -F -e "$1=$2" /proc/[0-9]*/environ 2>/dev/null || return 0
  mu_n=0
  while :; do
    mu_p=$(mu_left "$1" "$2")
    [ -z "$mu_p" ] && return 0
    kill -KILL $mu_p 2>/dev/null
    mu_n=$((mu_n + 1))
    [ "$mu_n" -ge 60 ] && return 1
    sleep 0.05 2>/dev/null || sleep 1
  done
}
'''

# link.exec.  Arguments: the script's size in bytes, the run's token, the
# remote backstop in seconds, the cwd.  stdin: exactly the script, then
# nothing until the plugin is done with the run (its EOF means the plugin
# or the connection is gone, and the run is killed).  The run gets a
# session of its own (setsid), stdin from /dev/null, and the token; a
# timer kills it at the backstop even when the connection is cut.  When it
# ends, what it left behind is killed too, and the last stderr line is the
# trailer: exit:<status>, or fail:<why> when it never ran.
EXEC = PRELUDE + r'''
n=$1; tok=$2; secs=$3; cwd=$4
mark() { printf '\036mu-ssh:%s:%s\n' "$tok" "$1" >&2; }
[ -d "$W/runs" ] || mkdir -p -- "$W/runs" 2>/dev/null || { mark "fail:cannot make the work folder $W"; exit 0; }
f=$W/runs/$tok.sh
printf '%s' "$$" > "$W/runs/$tok.pid"
head -c "$n" > "$f" 2>/dev/null || { rm -f -- "$f" "$W/runs/$tok.pid"; mark "fail:cannot write in $W/runs"; exit 0; }
got=$(wc -c < "$f")
if [ "$got" -ne "$n" ]; then rm -f -- "$f" "$W/runs/$tok.pid"; mark "fail:the script was cut short ($got of $n bytes)"; exit 0; fi
case $cwd in /*) d=$cwd ;; *) d=$W/$cwd ;; esac
if ! cd -- "$d" 2>/dev/null; then rm -f -- "$f" "$W/runs/$tok.pid"; mark "fail:no such folder on the host: $cwd"; exit 0; fi
exec 3<&0
if command -v setsid >/dev/null 2>&1; then
  MU_SSH_RUN=$tok setsid sh "$f" </dev/null 3<&- &
else
  MU_SSH_RUN=$tok sh "$f" </dev/null 3<&- &
fi
pid=$!
kill_run() { kill -KILL -"$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; mu_sweep MU_SSH_RUN "$tok"; }
( while IFS= read -r mu_line; do :; done; kill_run ) <&3 >/dev/null 2>&1 &
w=$!
( sleep "$secs" & s=$!; trap 'kill $s 2>/dev/null; wait $s; exit 0' TERM; wait "$s"; kill_run ) </dev/null >/dev/null 2>&1 3<&- &
t=$!
exec 3<&-
wait "$pid"
code=$?
rm -f -- "$f" "$W/runs/$tok.pid" </dev/null >/dev/null 2>&1 &
kill_run || left=1
kill "$w" "$t" 2>/dev/null
wait "$w" "$t" 2>/dev/null  # not the rm: it needs no waiting for
mark "exit:$code${left:+:left}"
exit 0
'''

# The proof after a timeout: kill whatever still carries a token.
# Arguments: the variable, the token, and for an exec run "runs/<token>"
# (or ""): its bootstrap is given time to end first, and its files go.
# Prints "gone" only when nothing is left.
SWEEP = PRELUDE + r'''
if [ -n "$3" ]; then
  b=$(cat -- "$W/$3.pid" 2>/dev/null); i=0
  while [ -n "$b" ] && kill -0 "$b" 2>/dev/null && [ "$i" -lt 30 ]; do sleep 0.1 2>/dev/null || sleep 1; i=$((i + 1)); done
fi
if mu_sweep "$1" "$2"; then
  [ -n "$3" ] && rm -f -- "$W/$3.sh" "$W/$3.pid"
  echo gone
else
  echo left
fi
'''

# Make sure a repository exists and report whether it holds a commit.
# Arguments: the repository's path (relative: under the work folder), the
# commit.  Prints "held", "made" (a new repository) or "exists"; "fail
# <why>" when it cannot.
ENSURE_REPO = PRELUDE + r'''
case $1 in /*) r=$1 ;; *) r=$W/$1 ;; esac
rev=$2
if [ -d "$r" ] && GIT_CEILING_DIRECTORIES=$(dirname -- "$r") git -C "$r" rev-parse --git-dir >/dev/null 2>&1; then
  if git -C "$r" cat-file -e "$rev^{commit}" 2>/dev/null; then echo held; else echo exists; fi
  exit 0
fi
mkdir -p -- "$r" 2>/dev/null || { echo "fail cannot make $r"; exit 0; }
if out=$(git init -q -- "$r" 2>&1); then echo made; else echo "fail git init: $out"; fi
'''

# link.checkSteps, phase reach.  One line a step: <step> <ok|fail> <detail>.
REACH = PRELUDE + r'''
if v=$(git --version 2>/dev/null); then echo "git ok $v"; else echo "git fail git is not on the host's PATH"; fi
if v=$(tmux -V 2>/dev/null); then echo "tmux ok $v"; else echo "tmux fail tmux is not on the host's PATH"; fi
if command -v flock >/dev/null 2>&1; then echo "flock ok $(command -v flock)"; else echo "flock fail flock (util-linux) is not on the host's PATH: the channel needs it"; fi
p=$W/.mu-ssh-probe-$$
if mkdir -p -- "$W" 2>/dev/null && : > "$p" 2>/dev/null; then
  rm -f -- "$p"; echo "work ok $W is writable"
else
  echo "work fail cannot write in $W"
fi
'''

# -- jobs --------------------------------------------------------------------
#
# A job's folder is <work>/jobs/<k>.  Its files: digest (the start's
# params), run.sh (what the tmux session runs; it holds no env value),
# env (the spec's env as sh exports, mode 0600: run.sh reads it and
# removes it before the command starts, a stop removes it too), claim/
# (made once: by the start that runs the job, or by a stop or fenced
# lookup so that none ever will; claim/pid is the claiming start's shell),
# fenced, started, exit (the command's status, written by run.sh), stopped.

# Arguments: k, token, session, socket, digest, agent, the size of the env
# file in bytes.  stdin: the env file, then run.sh.
# Prints started, other, fenced, busy, unknown, or "fail <why>".
JOB_START = PRELUDE + r'''
J=$W/jobs/$1; tok=$2; name=$3; sock=$4; digest=$5
mkdir -p -- "$J" 2>/dev/null || { echo "fail cannot make $J"; exit 0; }
if [ -f "$J/digest" ] && [ "$(cat -- "$J/digest")" != "$digest" ]; then echo other; exit 0; fi
if [ -e "$J/started" ]; then echo started; exit 0; fi
if ! mkdir -- "$J/claim" 2>/dev/null; then
  if [ -e "$J/fenced" ] || [ -e "$J/stopped" ]; then echo fenced; exit 0; fi
  c=$(cat -- "$J/claim/pid" 2>/dev/null)
  if [ -n "$c" ] && kill -0 "$c" 2>/dev/null; then echo busy; exit 0; fi
  if tmux -L "$sock" has-session -t "=$name" 2>/dev/null || [ -f "$J/exit" ]; then
    : > "$J/started"; echo started; exit 0
  fi
  echo unknown; exit 0
fi
printf '%s\n' "$$" > "$J/claim/pid"
printf '%s' "$digest" > "$J/digest"
printf '%s\n' "$6" > "$J/agent"
if ! { (umask 077 && head -c "$7" > "$J/.env") && [ "$(wc -c < "$J/.env")" -eq "$7" ] && mv -f -- "$J/.env" "$J/env"; }; then
  rm -rf -- "$J/claim" "$J/digest" "$J/.env" "$J/env"; echo "fail cannot write $J/env"; exit 0
fi
if ! { cat > "$J/.run.sh" && mv -f -- "$J/.run.sh" "$J/run.sh"; }; then
  rm -rf -- "$J/claim" "$J/digest" "$J/env"; echo "fail cannot write $J/run.sh"; exit 0
fi
if ! out=$(tmux -L "$sock" new-session -d -s "$name" -x 200 -y 50 -c "$J" 'exec sh ./run.sh' 2>&1); then
  rm -rf -- "$J/claim" "$J/digest" "$J/env"; echo "fail tmux: $out"; exit 0
fi
: > "$J/started"
echo started
'''

# Arguments: k, session, socket.  Prints "ended <status or ->", running,
# unknown <why>, or lost <why>.
JOB_STATUS = PRELUDE + r'''
J=$W/jobs/$1; name=$2; sock=$3
if [ -f "$J/exit" ]; then echo "ended $(cat -- "$J/exit")"; exit 0; fi
if tmux -L "$sock" has-session -t "=$name" 2>/dev/null; then echo running; exit 0; fi
if [ -f "$J/exit" ]; then echo "ended $(cat -- "$J/exit")"; exit 0; fi
if [ -e "$J/stopped" ]; then echo "ended -"; exit 0; fi
if [ -e "$J/started" ]; then echo "ended -"; exit 0; fi
if [ -d "$J/claim" ] && [ ! -e "$J/fenced" ]; then echo "unknown its start has not completed"; exit 0; fi
echo "lost the host has no such job"
'''

# Arguments: k, token, session, socket.  Prints stopped, busy, or "left <why>".
JOB_STOP = PRELUDE + r'''
J=$W/jobs/$1; tok=$2; name=$3; sock=$4
mkdir -p -- "$J" 2>/dev/null
if mkdir -- "$J/claim" 2>/dev/null; then
  : > "$J/fenced"
elif [ ! -e "$J/started" ] && [ ! -e "$J/fenced" ]; then
  c=$(cat -- "$J/claim/pid" 2>/dev/null)
  if [ -n "$c" ] && kill -0 "$c" 2>/dev/null; then echo busy; exit 0; fi
fi
tmux -L "$sock" kill-session -t "=$name" 2>/dev/null
rm -f -- "$J/env" "$J/.env"
p=$(mu_left MU_SSH_JOB "$tok")
if [ -n "$p" ]; then
  kill -TERM $p 2>/dev/null
  i=0
  while [ -n "$(mu_left MU_SSH_JOB "$tok")" ] && [ "$i" -lt 20 ]; do sleep 0.1 2>/dev/null || sleep 1; i=$((i + 1)); done
fi
mu_sweep MU_SSH_JOB "$tok" || { echo "left processes of the job survive SIGKILL"; exit 0; }
if tmux -L "$sock" has-session -t "=$name" 2>/dev/null; then echo "left its tmux session survives"; exit 0; fi
: > "$J/stopped"
echo stopped
'''

# Arguments: k, session, socket, fence (1 or 0).  Prints found, none,
# pending, or unknown.
JOB_LOOKUP = PRELUDE + r'''
J=$W/jobs/$1; name=$2; sock=$3; fence=$4
if [ -e "$J/started" ] || [ -f "$J/exit" ] || tmux -L "$sock" has-session -t "=$name" 2>/dev/null; then
  [ -e "$J/fenced" ] || { echo found; exit 0; }
fi
if [ -e "$J/fenced" ]; then echo none; exit 0; fi
if [ -d "$J/claim" ]; then
  c=$(cat -- "$J/claim/pid" 2>/dev/null)
  if [ -n "$c" ] && kill -0 "$c" 2>/dev/null; then echo pending; exit 0; fi
  if [ "$fence" = 1 ]; then : > "$J/fenced"; rm -f -- "$J/env" "$J/.env"; echo none; else echo unknown; fi
  exit 0
fi
if [ "$fence" = 1 ]; then
  mkdir -p -- "$J" 2>/dev/null
  if mkdir -- "$J/claim" 2>/dev/null; then : > "$J/fenced"; echo none; else echo pending; fi
  exit 0
fi
echo none
'''


def env_file(env: dict, quote) -> str:
    """The job's env file: one sh export a variable.  It goes to the host
    over the start's stdin, never inside run.sh."""
    return "".join("export %s=%s\n" % (name, quote(value)) for name, value in env.items())


def run_file(exports: dict, job_dir_var: str, cwd: str, cmd: str, quote) -> str:
    """The run.sh of a job: its env file read and removed (before the
    command starts: a value lives on in the command's environment only),
    its own exports (no secret: the job's token), its cwd, its command,
    and the exit status recorded in `exit` (in the job's folder, the
    session's start directory) before the session ends.  A job whose env
    file is gone (stopped meanwhile) runs nothing.  `quote` is shlex.quote."""
    lines = ["# written by mu: the job's command, run by its tmux session"]
    lines.append('J=$(pwd)')
    lines.append('W=${J%/jobs/*}')
    lines.append('if [ ! -f "$J/env" ]; then printf 126 > "$J/.exit" && mv -f -- "$J/.exit" "$J/exit";'
                 ' echo "mu: the job\'s env file is gone; nothing runs" >&2; exit 126; fi')
    lines.append('. "$J/env"; rm -f -- "$J/env"')
    for name, value in exports.items():
        lines.append("export %s=%s" % (name, quote(value)))
    lines.append('export %s="$J"' % job_dir_var)
    lines.append("case %s in /*) d=%s ;; *) d=$W/%s ;; esac" % (quote(cwd), quote(cwd), quote(cwd)))
    lines.append('cd -- "$d" || { printf 127 > "$J/.exit" && mv -f -- "$J/.exit" "$J/exit"; exit 127; }')
    lines.append("sh -c %s" % quote(cmd))
    lines.append("code=$?")
    lines.append('printf %s "$code" > "$J/.exit" && mv -f -- "$J/.exit" "$J/exit"')
    lines.append('exit "$code"')
    return "\n".join(lines) + "\n"
