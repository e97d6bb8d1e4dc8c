#!/usr/bin/env bash
# Proves emurdma's libraries on a real kernel verbs device: soft-RoCE (rdma_rxe) in a qemu VM.
#
#   scripts/hwtest.sh            (root; BUILD_DIR=<build dir>, default build/)
#
# 1. installs the host packages it needs (qemu, debootstrap, cpio, kmod), as scripts/setup.sh;
# 2. builds once, cached in $BUILD_DIR/hw/: a Debian kernel (the linux-image .deb, extracted,
#    not installed) with the modules rdma_rxe, veth, ib_uverbs, crc32_generic and their
#    dependencies, and a root file system (debootstrap --variant=minbase with rdma-core, the verbs utilities,
#    perftest, dapl2-utils and the libraries our .so files need) packed as an initramfs;
# 3. appends, at every run, a second initramfs archive with this build's libibverbs.so.1 and
#    libdaplemu.so.2, scripts/emurdma, a dat.conf for the guest and tests/hw/ (the guest's
#    /init, the suite and its programs hw_dat_srq and hw_side_by_side, built here if needed),
#    so the cached root is reused;
# 4. boots it (KVM if it works here, else TCG; no network card, serial console on stdout), and
#    the guest sets up rxe0 over a veth pair and runs tests/hw/suite.sh;
# 5. exits 0 only when the guest printed its closing "N passed, 0 failed" line with N >= 1;
#    77 when this host cannot run it (not root, and packages or the guest are missing), else 1.
#
# Variables:
#   BUILD_DIR              the build to test, and the cache in $BUILD_DIR/hw (default build/)
#   HWTEST_ACCEL           auto (KVM if it boots here, else TCG), kvm or tcg
#   HWTEST_TIMEOUT         seconds the VM may run (540)
#   HWTEST_PROGRAM_LIMIT   seconds one program in the guest may run (90)
#   HWTEST_ONLY            an ERE: run only the checks whose name matches
#   HWTEST_LOG             EMURDMA_LOG of the guest's programs: info (default), debug, trace
#   HWTEST_SHOW_LINES      lines of a failed program's output shown (25)
#   HWTEST_REBUILD=1       rebuild the cached kernel and root file system
#   HWTEST_MIRROR          Debian mirror for debootstrap (default: the one apt uses)
#   HWTEST_SUITE           hw (default): tests/hw/suite.sh; pyverbs: rdma-core's own pyverbs
#                          suite (Debian's python3-pyverbs) on rxe0, for docs/conformance.md's
#                          rxe column. Its guest is cached apart ($BUILD_DIR/hw-pyverbs); the
#                          suite's verbose output is kept in $BUILD_DIR/hw-pyverbs/pyverbs-rxe.log.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
me=hwtest

# qemu aborts when KVM refuses the CPU model: no core file in the repository.
ulimit -c 0

die() {
  echo "$me: $*" >&2
  exit 1
}
# Exit status 77 (ctest's SKIP_RETURN_CODE): this host cannot run the test at all.
skip() {
  echo "$me: SKIPPED: $*" >&2
  exit 77
}
note() { echo "$me: $*"; }

build_dir="${BUILD_DIR:-build}"
[[ $build_dir == /* ]] || build_dir="$repo/$build_dir"
suite="${HWTEST_SUITE:-hw}"
case "$suite" in
  hw) hw="$build_dir/hw" ;;
  pyverbs) hw="$build_dir/hw-pyverbs" ;;
  *) die "HWTEST_SUITE=$suite: expected hw or pyverbs" ;;
esac
verbs_lib="$build_dir/verbs_api/libibverbs.so.1"
rdmacm_lib="$build_dir/rdmacm_api/librdmacm.so.1"
dat_lib="$build_dir/dat_api/libdaplemu.so.2"

# What the guest is made of. Bump recipe_version when the way the cache is built changes:
# it is part of the cache key.
readonly recipe_version=1
readonly guest_suite=bookworm
guest_packages=(rdma-core ibverbs-providers ibverbs-utils perftest libdapl2 dapl2-utils
  librdmacm1 rdmacm-utils libspdlog1.10 libfmt9 iproute2 kmod)
# crc32_generic: rdma_rxe asks the crypto API for "crc32" (the RoCE ICRC) at device creation,
# a dependency modinfo does not list.
# rdma_ucm: the kernel's rdma_cm for the system librdmacm (/dev/infiniband/rdma_cm).
readonly guest_modules=(rdma_rxe veth ib_uverbs crc32_generic rdma_ucm)
[[ $suite == pyverbs ]] && guest_packages+=(python3-pyverbs)

# ---- host packages -------------------------------------------------------------------------
host_packages=(qemu-system-x86 debootstrap cpio kmod gzip)
missing=()
for pkg in "${host_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if ((${#missing[@]} > 0)); then
  [[ $(id -u) -eq 0 ]] || skip "root is needed to install ${missing[*]}"
  note "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || die "apt-get update failed"
  apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null >/dev/null ||
    die "apt-get install ${missing[*]} failed"
fi

# ---- the project's build -------------------------------------------------------------------
if [[ ! -e $verbs_lib || ! -e $dat_lib ]]; then
  note "no build in $build_dir (missing $(basename "$verbs_lib") or $(basename "$dat_lib")): building it"
  BUILD_DIR="$build_dir" bash scripts/build.sh || die "scripts/build.sh failed (BUILD_DIR=$build_dir)"
fi
[[ -e $verbs_lib ]] || die "$verbs_lib is missing after the build"
[[ -e $rdmacm_lib ]] || die "$rdmacm_lib is missing (build the emurdma_rdmacm target)"
[[ -e $dat_lib ]] || die "$dat_lib is missing after the build"
[[ -e $build_dir/dat_api/dat.conf ]] || die "$build_dir/dat_api/dat.conf is missing (CMake generates it)"

# The suite's own programs (tests/hw/CMakeLists.txt): built here when missing or older than
# their source. They link to the system's libraries only, so building them leaves the
# libraries under test untouched. One that cannot be built is left out of the guest, and the
# suite fails its check.
hw_programs=(hw_dat_srq hw_side_by_side hw_cm_side_by_side)
hw_program_paths=()
stale=()
for prog in "${hw_programs[@]}"; do
  [[ -x $build_dir/tests/hw/$prog && ! tests/hw/$prog.cpp -nt $build_dir/tests/hw/$prog ]] ||
    stale+=("$prog")
done
if ((${#stale[@]} > 0)); then
  note "building ${stale[*]}"
  cmake --build "$build_dir" --target "${stale[@]}" -j2 >"$build_dir/hwtest-programs.log" 2>&1 ||
    note "could not build ${stale[*]} (is add_subdirectory(hw) in tests/CMakeLists.txt? log: $build_dir/hwtest-programs.log)"
fi
for prog in "${hw_programs[@]}"; do
  if [[ -x $build_dir/tests/hw/$prog ]]; then
    hw_program_paths+=("$build_dir/tests/hw/$prog")
  else
    note "$build_dir/tests/hw/$prog is missing: its check will fail"
  fi
done

# The Debian packages of the shared libraries our .so files and the suite's programs load
# (besides libibverbs.so.1, which is ours, and the libc loader), so the guest can run them
# whatever they link to.
runtime_packages() {
  local path pkg
  LD_LIBRARY_PATH="$build_dir/verbs_api" ldd "$verbs_lib" "$dat_lib" "$rdmacm_lib" "${hw_program_paths[@]}" |
    awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    while read -r path; do
      [[ $(basename "$path") == libibverbs.so.1 ]] && continue
      path="$(readlink -f "$path")"
      # merged /usr: dpkg may know the file under /lib or under /usr/lib
      pkg="$(dpkg -S "$path" 2>/dev/null || dpkg -S "${path#/usr}" 2>/dev/null ||
        dpkg -S "/usr$path" 2>/dev/null || true)"
      [[ -n $pkg ]] || die "no Debian package owns $path (needed by our libraries)"
      echo "${pkg%%:*}"
    done | sort -u
}
extra_packages="$(runtime_packages)" || die "cannot tell which Debian packages our libraries need"
mapfile -t guest_packages < <(printf '%s\n' "${guest_packages[@]}" "$extra_packages" | sed '/^$/d' | sort -u)

# ---- the Debian mirror apt uses ------------------------------------------------------------
# The first source (one-line .list or deb822 .sources) that serves "<suite> main" for binary
# packages; security and update suites are not it.
apt_mirror() {
  local file line f
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -r $file ]] || continue
    while read -r line; do
      # deb [options] URI suite components...
      line="$(sed -E 's/\[[^]]*\]//' <<<"$line")"
      read -r -a f <<<"$line"
      ((${#f[@]} >= 4)) && [[ ${f[0]} == deb && ${f[2]} == "$guest_suite" && " ${f[*]:3} " == *" main "* ]] &&
        { echo "${f[1]}"; return 0; }
    done < <(grep -E '^[[:space:]]*deb[[:space:]]' "$file")
  done
  for file in /etc/apt/sources.list.d/*.sources; do
    [[ -r $file ]] || continue
    # one stanza per paragraph: print its first URI when it qualifies
    if awk -v suite="$guest_suite" '
        function flush() {
          if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") &&
              (" " comps " ") ~ / main / && uri != "" && enabled != "no") { print uri; found = 1; exit }
          types = suites = comps = uri = enabled = ""
        }
        /^[[:space:]]*#/ { next }
        /^[[:space:]]*$/ { flush(); next }
        { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "")
          if (key == "types") types = $0; else if (key == "suites") suites = $0
          else if (key == "components") comps = $0; else if (key == "enabled") enabled = $0
          else if (key == "uris") { split($0, u, " "); uri = u[1] } }
        END { if (!found) flush(); exit !found }' "$file"; then
      return 0
    fi
  done
  return 1
}

# ---- the cached guest: kernel + root -------------------------------------------------------
mirror="${HWTEST_MIRROR:-}"
if [[ -z $mirror ]]; then
  mirror="$(apt_mirror | head -1)" || true
  [[ -n $mirror ]] || die "no apt source serves '$guest_suite main' (looked in /etc/apt/sources.list*); set HWTEST_MIRROR"
fi
cache_key="$(printf '%s\n' "recipe $recipe_version" "suite $guest_suite" "mirror $mirror" \
  "packages ${guest_packages[*]}" "modules ${guest_modules[*]}" | sha256sum | cut -d' ' -f1)"
kernel="$hw/vmlinuz"
rootfs="$hw/rootfs.cpio.gz"

# module_closure <modules dir> <module...>: the .ko files of the modules and of everything they
# depend on (modinfo's "depends"), relative to the modules dir.
module_closure() {
  local dir=$1 name file dep
  shift
  declare -A files=() seen=()
  while read -r file; do
    name="$(basename "$file")"
    name="${name%%.ko*}"
    files[${name//-/_}]="$file"
  done < <(cd "$dir" && find kernel -name '*.ko*')
  local queue=("$@")
  while ((${#queue[@]} > 0)); do
    name="${queue[0]//-/_}"
    queue=("${queue[@]:1}")
    [[ -n ${seen[$name]:-} ]] && continue
    seen[$name]=1
    file="${files[$name]:-}"
    [[ -n $file ]] || die "kernel module $name not found in $dir"
    echo "$file"
    for dep in $(modinfo -F depends "$dir/$file" | tr ',' ' '); do queue+=("$dep"); done
  done
}

build_guest() {
  [[ $(id -u) -eq 0 ]] || skip "building the guest (debootstrap, chroot) needs root"
  local tmp="$hw/tmp" t0 pkg kver deb
  rm -rf "$tmp" "$kernel" "$rootfs" "$hw/cache.key"
  mkdir -p "$tmp/kernel"

  t0=$SECONDS
  # The kernel the metapackage points at, downloaded and unpacked, never installed here.
  pkg="$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')"
  if [[ -z $pkg ]]; then
    apt-get update -qq || die "apt-get update failed"
    pkg="$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')"
  fi
  [[ -n $pkg ]] || die "apt knows no linux-image-amd64 kernel"
  note "downloading kernel package $pkg"
  (cd "$tmp" && apt-get download -qq -o APT::Sandbox::User=root "$pkg") || die "apt-get download $pkg failed"
  deb="$(ls "$tmp"/linux-image-*.deb)"
  dpkg-deb -x "$deb" "$tmp/kernel" || die "dpkg-deb -x $deb failed"
  kver="$(ls "$tmp/kernel/lib/modules")"
  [[ -f $tmp/kernel/boot/vmlinuz-$kver ]] || die "no vmlinuz-$kver in $deb"
  note "kernel $kver ready in $((SECONDS - t0)) s"

  t0=$SECONDS
  note "debootstrap $guest_suite from $mirror: ${guest_packages[*]} (log: $hw/debootstrap.log)"
  if ! debootstrap --variant=minbase --include="$(IFS=,; echo "${guest_packages[*]}")" \
    "$guest_suite" "$tmp/root" "$mirror" >"$hw/debootstrap.log" 2>&1; then
    tail -n 20 "$hw/debootstrap.log" >&2
    die "debootstrap failed (full log: $hw/debootstrap.log)"
  fi
  note "debootstrap done in $((SECONDS - t0)) s"

  t0=$SECONDS
  # Only the modules the guest loads, then depmod for modprobe.
  local src="$tmp/kernel/lib/modules/$kver" dst="$tmp/root/lib/modules/$kver" file
  mkdir -p "$dst"
  cp "$src"/modules.order "$src"/modules.builtin "$src"/modules.builtin.modinfo "$dst"/
  module_closure "$src" "${guest_modules[@]}" >"$tmp/modules.list"
  while read -r file; do
    mkdir -p "$dst/$(dirname "$file")"
    cp "$src/$file" "$dst/$file"
  done <"$tmp/modules.list"
  depmod -b "$tmp/root" "$kver" || die "depmod for $kver failed"
  # What the guest never reads: documentation, translations, apt's package cache and lists.
  # rdma-core's pyverbs suite ships as documentation: kept for HWTEST_SUITE=pyverbs.
  if [[ -d $tmp/root/usr/share/doc/rdma-core/tests ]]; then
    mv "$tmp/root/usr/share/doc/rdma-core/tests" "$tmp/pyverbs-tests"
  fi
  rm -rf "$tmp"/root/usr/share/{doc,man,info,locale}/* "$tmp"/root/var/cache/apt/* \
    "$tmp"/root/var/lib/apt/lists/*
  if [[ -d $tmp/pyverbs-tests ]]; then
    mkdir -p "$tmp/root/usr/share/doc/rdma-core"
    mv "$tmp/pyverbs-tests" "$tmp/root/usr/share/doc/rdma-core/tests"
  fi
  (cd "$tmp/root" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) >"$rootfs.tmp" ||
    die "packing the root file system failed"
  mv "$rootfs.tmp" "$rootfs"
  cp "$tmp/kernel/boot/vmlinuz-$kver" "$kernel"
  echo "$kver" >"$hw/kernel.version"
  echo "$cache_key" >"$hw/cache.key"
  rm -rf "$tmp"
  note "initramfs $(du -h "$rootfs" | cut -f1) packed in $((SECONDS - t0)) s"
}

mkdir -p "$hw"
if [[ ${HWTEST_REBUILD:-0} == 1 || ! -f $kernel || ! -f $rootfs ||
  $(cat "$hw/cache.key" 2>/dev/null) != "$cache_key" ]]; then
  t_build=$SECONDS
  build_guest
  note "guest built in $((SECONDS - t_build)) s"
else
  note "using the cached guest in $hw (kernel $(cat "$hw/kernel.version" 2>/dev/null))"
fi

# ---- this run's overlay: our libraries, the wrapper, the suite -----------------------------
default_limit=540
[[ $suite == pyverbs ]] && default_limit=1200
vm_limit="${HWTEST_TIMEOUT:-$default_limit}"
[[ $vm_limit =~ ^[0-9]+$ ]] || die "HWTEST_TIMEOUT=$vm_limit: expected seconds"
run="$hw/run"
rm -rf "$run"
mkdir -p "$run/overlay/opt/emurdma/"{bin,lib/emurdma,etc,hw}
ov="$run/overlay"
# The installed layout (bin/emurdma beside lib/emurdma/): the wrapper finds both libraries
# there without any variable.
cp -P "$build_dir"/verbs_api/libibverbs.so.1* "$build_dir"/dat_api/libdaplemu.so.2* \
  "$build_dir"/rdmacm_api/librdmacm.so.1* "$ov/opt/emurdma/lib/emurdma/"
cp scripts/emurdma "$ov/opt/emurdma/bin/emurdma"
cp tests/hw/suite.sh tests/hw/pyverbs_suite.sh "$ov/opt/emurdma/hw/"
if ((${#hw_program_paths[@]} > 0)); then
  mkdir -p "$ov/opt/emurdma/hw/bin"
  cp "${hw_program_paths[@]}" "$ov/opt/emurdma/hw/bin/"
fi
cp tests/hw/guest_init.sh "$ov/init"
chmod 755 "$ov/init" "$ov/opt/emurdma/bin/emurdma" "$ov"/opt/emurdma/hw/*.sh
# The build's dat.conf names the provider by its build path: point it at the guest's copy and
# add the IA of rxe0's port 1 (ia_params "<device> <port>": the provider reaches it through
# the system rdma-core).
guest_provider=/opt/emurdma/lib/emurdma/libdaplemu.so.2
{
  sed -E "s#[^ \"]*/libdaplemu\.so\.2#$guest_provider#" "$build_dir/dat_api/dat.conf" | grep -v '^rxe0-1 '
  echo "rxe0-1 u2.0 nonthreadsafe default $guest_provider dapl.2.0 \"rxe0 1\" \"\""
} >"$ov/opt/emurdma/etc/dat.conf"
{
  printf 'HWTEST_SUITE=%q\n' "$suite"
  printf 'HWTEST_ONLY=%q\n' "${HWTEST_ONLY:-}"
  printf 'HWTEST_LOG=%q\n' "${HWTEST_LOG:-info}"
  printf 'HWTEST_SHOW_LINES=%q\n' "${HWTEST_SHOW_LINES:-25}"
  printf 'HWTEST_PROGRAM_LIMIT=%q\n' "${HWTEST_PROGRAM_LIMIT:-90}"
  # The suite stops in time for the guest to report and power off before qemu is killed.
  printf 'HWTEST_SUITE_LIMIT=%q\n' "$((vm_limit > 120 ? vm_limit - 60 : vm_limit / 2))"
  printf 'export HWTEST_SUITE HWTEST_ONLY HWTEST_LOG HWTEST_SHOW_LINES HWTEST_PROGRAM_LIMIT HWTEST_SUITE_LIMIT\n'
} >"$ov/opt/emurdma/hw/env"
(cd "$ov" && find . -print0 | cpio --null -o -H newc -R 0:0 --quiet | gzip -1) >"$run/overlay.cpio.gz" ||
  die "packing the overlay failed"
# The kernel unpacks concatenated archives in order; later files win.
cat "$rootfs" "$run/overlay.cpio.gz" >"$run/initrd.img"

# ---- boot ----------------------------------------------------------------------------------
console="$run/console.log"
qemu_pid=""
tail_pid=""
# stop_vm: ends the VM of boot() (timeout passes the TERM on to qemu) and reaps it.
stop_vm() {
  [[ -n $qemu_pid ]] || return 0
  if [[ -s $run/timeout.pid ]]; then
    kill "$(cat "$run/timeout.pid")" 2>/dev/null || true
  else
    kill "$qemu_pid" 2>/dev/null || true
  fi
  wait "$qemu_pid" 2>/dev/null || true
  qemu_pid=""
}
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  stop_vm
  [[ -n $tail_pid ]] && kill "$tail_pid" 2>/dev/null
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

readonly boot_marker="emurdma-hw: guest init started"
# boot <probe seconds or 0> <qemu accel args...>: runs the VM to its end, its console streamed
# to stdout and kept in $console. With a probe time, gives up (status 3) when the guest's
# /init has not spoken by then: KVM inside some VMs hangs in early boot instead of failing.
boot() {
  local probe=$1 status=0 waited=0
  shift
  : >"$console"
  rm -f "$run/timeout.pid"
  # Waited for in a subshell, so that the shell's "Aborted" notice of a qemu that crashed (KVM
  # refusing the CPU) lands in qemu.err; timeout's pid is kept to stop qemu through it.
  (
    timeout -k 10 "$vm_limit" qemu-system-x86_64 "$@" -m 2048 -smp 2 \
      -nic none -display none -monitor none -serial stdio -no-reboot \
      -kernel "$kernel" -initrd "$run/initrd.img" \
      -append "console=ttyS0 quiet loglevel=4 panic=-1" &
    echo $! >"$run/timeout.pid"
    wait $!
  ) </dev/null >"$console" 2>"$run/qemu.err" &
  qemu_pid=$!
  tail -n +1 -f --pid="$qemu_pid" "$console" | sed -u 's/\r$//' &
  tail_pid=$!
  if ((probe > 0)); then
    while ! grep -qF "$boot_marker" "$console"; do
      if ! kill -0 "$qemu_pid" 2>/dev/null || ((waited >= probe * 10)); then
        stop_vm
        wait "$tail_pid" 2>/dev/null || true
        tail_pid=""
        return 3
      fi
      sleep 0.1
      waited=$((waited + 1))
    done
  fi
  wait "$qemu_pid" || status=$?
  qemu_pid=""
  wait "$tail_pid" 2>/dev/null || true
  tail_pid=""
  if ((status == 124 || status == 137)); then
    note "the VM did not finish within $vm_limit s: killed"
  elif ((status != 0)); then
    note "qemu exited with status $status: $(tail -n 5 "$run/qemu.err" | tr '\n' ' ')"
  fi
  return 0
}

accel="${HWTEST_ACCEL:-auto}"
kvm_verdict="$hw/kvm.verdict" # "broken <host kernel> <qemu version>" once KVM failed here
host_id="$(uname -r) $(qemu-system-x86_64 --version | head -1)"
t_boot=$SECONDS
case "$accel" in
  auto | kvm)
    if [[ ! -w /dev/kvm ]]; then
      [[ $accel == kvm ]] && die "HWTEST_ACCEL=kvm but /dev/kvm is not usable"
      accel=tcg
    elif [[ $accel == auto && $(cat "$kvm_verdict" 2>/dev/null) == "broken $host_id" ]]; then
      note "KVM failed on this host before ($kvm_verdict): using TCG"
      accel=tcg
    else
      note "booting with KVM"
      if boot 20 -accel kvm -cpu host; then
        accel=kvm
      else
        if [[ -s $run/qemu.err ]]; then
          note "KVM failed: $(head -n 2 "$run/qemu.err" | tr '\n' ' '); falling back to TCG"
        else
          note "KVM did not boot the guest within 20 s; falling back to TCG"
        fi
        [[ $accel == kvm ]] && die "HWTEST_ACCEL=kvm: KVM does not work here"
        echo "broken $host_id" >"$kvm_verdict"
        accel=tcg
      fi
    fi
    ;;
  tcg) ;;
  *) die "HWTEST_ACCEL=$accel: expected auto, kvm or tcg" ;;
esac
if [[ $accel == tcg ]]; then
  note "booting with TCG (software emulation)"
  t_boot=$SECONDS
  boot 0 -accel tcg
fi
note "the VM ran for $((SECONDS - t_boot)) s ($accel)"

# ---- verdict -------------------------------------------------------------------------------
results="$(tr -d '\r' <"$console" | grep -E '^(PASS|FAIL|SKIP) ' || true)"
closing="$(tr -d '\r' <"$console" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1 || true)"
if [[ $suite == pyverbs ]]; then
  # The suite's lines, as run_tests.py -v printed them, without the console's prefix.
  tr -d '\r' <"$console" | sed -n 's/^pyverbs| //p' >"$hw/pyverbs-rxe.log"
  note "pyverbs suite output on rxe0: $hw/pyverbs-rxe.log ($(tail -n 3 "$hw/pyverbs-rxe.log" | tr '\n' ' '))"
fi
echo
echo "== soft-RoCE results ($accel; console: $console)"
[[ -z $results ]] || echo "$results"
if [[ -z $closing ]]; then
  echo "$me: FAILED: the guest printed no closing 'N passed, N failed' line"
  exit 1
fi
echo "$closing"
read -r n_passed _ n_failed _ <<<"$closing"
if ((n_failed == 0 && n_passed >= 1)); then
  echo "$me: OK"
  exit 0
fi
echo "$me: FAILED"
exit 1
