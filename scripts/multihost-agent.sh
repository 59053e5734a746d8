#!/usr/bin/env bash
# The launch agent scripts/multihost.sh gives the MPI launchers in place of ssh: it runs a command
# "on a host" by running it inside that host's network namespace, with ssh's calling convention.
#
#   multihost-agent.sh [-x|-X|-o OPT|...] HOST COMMAND...
#
# What the launchers pass (read from their sources):
# - Open MPI 4.1 (orte/mca/plm/rsh/plm_rsh_module.c, setup_launch and ssh_child): argv is the
#   agent (plm_rsh_agent, split on spaces), the words of plm_rsh_args, the node name, then the
#   orted command line as further words whose MCA values are quoted for a shell
#   (mca_base_cmd_line_wrap_args); it is exec'd with stdin on /dev/null.
# - MPICH 4.0 hydra (src/pm/hydra/tools/bootstrap/external/external_common_launch.c,
#   HYDT_bscd_common_launch_procs): with `-launcher ssh -launcher-exec AGENT`, argv is AGENT, "-x"
#   (X forwarding off), the host name, the quoted hydra_pmi_proxy path and its arguments.
# Like ssh, the agent skips leading options, takes the host, joins the rest with spaces and gives
# it to a shell on the "host" (ssh runs `$SHELL -c "<joined words>"` on the remote side).
#
# HOST is an address or name listed in /run/tpcomm-multihost/hosts ("ADDRESS NAMESPACE NAME" per
# line, written by `scripts/multihost.sh up`). The command runs in namespace NAMESPACE, in its own
# UTS namespace whose hostname is NAME (so each "host" has its own host name, as real nodes do),
# with a clean environment, like a fresh ssh login: nothing of the launcher's environment leaks in.
set -euo pipefail
map=/run/tpcomm-multihost/hosts
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-p|-l|-i|-F) shift 2 ;;     # ssh options that take a value
    -*) shift ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then
  echo "multihost-agent: usage: $0 [ssh options] HOST COMMAND..." >&2
  exit 255
fi
host="$1"; shift
# user@host, as hydra writes it when a host has a user
host="${host#*@}"
line="$(awk -v h="$host" '$1 == h || $3 == h { print; exit }' "$map" 2>/dev/null || true)"
if [ -z "$line" ]; then
  echo "multihost-agent: unknown host '$host' (not in $map; run scripts/multihost.sh up)" >&2
  exit 255   # ssh's code for a connection failure
fi
read -r _addr ns name <<<"$line"
cmd="$*"
exec ip netns exec "$ns" unshare --uts /bin/sh -c 'hostname "$1"; shift; exec "$@"' sh "$name" \
  env -i HOME="${HOME:-/root}" USER="$(id -un)" LOGNAME="$(id -un)" SHELL=/bin/sh LANG=C.UTF-8 \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  /bin/sh -c "$cmd"
