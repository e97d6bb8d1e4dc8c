# Two hosts on one machine, for the tests that run processes across hosts: two network
# namespaces joined by a veth pair, 198.18.0.1/15 (a) and 198.18.0.2/15 (b), the benchmarking
# range. Sourced (bash), not run: tests/mp/two_host.sh, tests/programs/run_program.sh and
# tests/rdmacm_programs/run_pair.sh share it. What to do when the namespaces cannot be made is
# the caller's: a program test is SKIPPED (exit 77), a two-host engine test FAILS.
#
#   two_namespaces_why_not            prints why they cannot be made here and returns 0;
#                                     returns 1 (prints nothing) when they can be tried
#   two_namespaces_up NS_PREFIX VETH_PREFIX
#                                     creates them; sets ns_a ns_b veth_a veth_b addr_a addr_b.
#                                     Returns 0; 2 when the kernel refuses the first namespace
#                                     (no namespace support); 1 on any later failure. The
#                                     reason is in $two_namespaces_error.
#   two_namespaces_down               removes them (their veth ends go with them); safe to call
#                                     twice or before two_namespaces_up
#
# Names carry the caller's PID, so parallel tests do not collide; the veth names stay within
# the 15 characters the kernel allows for a prefix of up to 4 characters.

ns_a="" ns_b="" veth_a="" veth_b="" addr_a="" addr_b=""
two_namespaces_error=""

two_namespaces_why_not() {
  if [[ $(id -u) != 0 ]]; then
    echo "two network namespaces need root (CI runs as root)"
  elif ! command -v ip >/dev/null; then
    echo "the ip command (iproute2) is not installed"
  elif ! ip netns list >/dev/null 2>&1; then
    echo "ip netns is not available here"
  else
    return 1
  fi
  return 0
}

two_namespaces_up() {
  local ns_prefix=$1 veth_prefix=$2 tag=$$ err
  two_namespaces_error=""
  if ! err=$(ip netns add "${ns_prefix}_a_$tag" 2>&1); then
    two_namespaces_error="ip netns add failed (no network namespace support here?): $err"
    return 2
  fi
  ns_a="${ns_prefix}_a_$tag"
  if ! err=$(ip netns add "${ns_prefix}_b_$tag" 2>&1); then
    two_namespaces_error="ip netns add ${ns_prefix}_b_$tag failed: $err"
    return 1
  fi
  ns_b="${ns_prefix}_b_$tag"
  veth_a="${veth_prefix}a$tag"
  veth_b="${veth_prefix}b$tag"
  addr_a=198.18.0.1
  addr_b=198.18.0.2
  if ! err=$({
    ip link add "$veth_a" netns "$ns_a" type veth peer name "$veth_b" netns "$ns_b" &&
      ip -n "$ns_a" addr add "$addr_a/15" dev "$veth_a" &&
      ip -n "$ns_b" addr add "$addr_b/15" dev "$veth_b" &&
      ip -n "$ns_a" link set lo up && ip -n "$ns_b" link set lo up &&
      ip -n "$ns_a" link set "$veth_a" up && ip -n "$ns_b" link set "$veth_b" up
  } 2>&1); then
    two_namespaces_error="setting up the veth pair failed: $err"
    return 1
  fi
  return 0
}

two_namespaces_down() {
  [[ -n $ns_a ]] && ip netns del "$ns_a" 2>/dev/null
  [[ -n $ns_b ]] && ip netns del "$ns_b" 2>/dev/null
  ns_a="" ns_b=""
  return 0
}
