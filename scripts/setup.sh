#!/usr/bin/env bash
# Installs, non-interactively, every Debian package emurdma builds with or tests against.
# Idempotent: when everything is present it only runs dpkg-query and returns.
set -euo pipefail

packages=(
  cmake g++ make ninja-build pkg-config
  # The fuzz targets (scripts/fuzz.sh): -fsanitize=fuzzer's runtime is libclang-rt-14-dev,
  # only recommended by Debian 12's clang (and recommends are not installed here).
  clang libclang-rt-14-dev
  libboost-dev libspdlog-dev libgtest-dev libgmock-dev libbenchmark-dev libssl-dev
  libibverbs-dev librdmacm-dev libdapl-dev libdapl2
  ibverbs-utils rdmacm-utils perftest dapl2-utils libfabric-bin ucx-utils qperf iproute2
  # rdma-core's own test suite (tests/conformance): pyverbs, its tests as documentation.
  python3-pyverbs
  # MPI over emu0 (tests/mpi): both MPIs of Debian with their compiler wrappers.
  openmpi-bin libopenmpi-dev mpich libmpich-dev python3-mpi4py
  # The capture's tests (EMURDMA_PCAP) read their pcapng files back with tshark.
  tshark
  # scripts/bench.sh sweep draws its plots with gnuplot (the build without X).
  gnuplot-nox
)

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "setup: installing ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  echo "setup: root is needed to install packages (missing: ${missing[*]})" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# wireshark-common asks whether non-superusers may capture packets; noninteractive takes the
# default (no), and the preseed says so explicitly: nothing here captures, tests only read files.
if [[ " ${missing[*]} " == *" tshark "* ]]; then
  echo 'wireshark-common wireshark-common/install-setuid boolean false' | debconf-set-selections
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
